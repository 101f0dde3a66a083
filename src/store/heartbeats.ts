import type { Db } from './prisma';

export class HeartbeatStore {
  constructor(private readonly db: Db) {}

  async beat(minute: Date): Promise<void> {
    await this.db.serviceHeartbeat.upsert({ where: { minute }, create: { minute }, update: {} });
  }

  countSince(since: Date): Promise<number> {
    return this.db.serviceHeartbeat.count({ where: { minute: { gte: since } } });
  }

  async oldestSince(since: Date): Promise<Date | null> {
    const oldest = await this.db.serviceHeartbeat.findFirst({ where: { minute: { gte: since } }, orderBy: { minute: 'asc' } });
    return oldest?.minute ?? null;
  }

  prune(before: Date): Promise<unknown> {
    return this.db.serviceHeartbeat.deleteMany({ where: { minute: { lt: before } } });
  }

  async ping(): Promise<void> {
    await this.db.$queryRawUnsafe('SELECT 1');
  }
}
