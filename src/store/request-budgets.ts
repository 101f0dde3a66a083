// The request budgets' shared windows (RequestBudgetWindow): what each control-plane replica adds
// per key and minute. Each key's upsert is one atomic INSERT … ON CONFLICT DO UPDATE (Prisma's
// native upsert for a unique `where`), which answers the new total; one sync's upserts are one
// transaction, so a failed sync adds nothing and can be sent again whole.
import type { SharedBudgetCounts } from '../domain/budgets';
import type { Db } from './prisma';

export class RequestBudgetStore implements SharedBudgetCounts {
  constructor(private readonly db: Db) {}

  async add(windowStart: Date, added: Map<string, number>): Promise<Map<string, number>> {
    const rows = await this.db.$transaction([...added].map(([key, count]) =>
      this.db.requestBudgetWindow.upsert({
        where: { key_windowStart: { key, windowStart } },
        create: { key, windowStart, count },
        update: { count: { increment: count } },
        select: { key: true, count: true },
      })));
    return new Map(rows.map((row) => [row.key, row.count]));
  }

  async read(windowStart: Date, keys: string[]): Promise<Map<string, number>> {
    const rows = await this.db.requestBudgetWindow.findMany({ where: { windowStart, key: { in: keys } }, select: { key: true, count: true } });
    return new Map(rows.map((row) => [row.key, row.count]));
  }

  async removeBefore(before: Date): Promise<void> {
    await this.db.requestBudgetWindow.deleteMany({ where: { windowStart: { lt: before } } });
  }
}
