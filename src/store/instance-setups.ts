// What applying an environment version to an instance did (steps, output). The instance row holds
// setup_status and setup_error; this table holds the details the setup endpoint answers.
import type { InstanceSetup, Prisma } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';

export type { InstanceSetup };

export interface SetupRecord {
  steps: object[];
  output: string;
  outputTruncated: boolean;
}

export class InstanceSetupStore {
  constructor(private readonly db: Db) {}

  find(accountId: string, instanceId: string): Promise<InstanceSetup | null> {
    return this.db.instanceSetup.findFirst({ where: { accountId, instanceId } });
  }

  /** Writes the record; an instance deleted meanwhile is left deleted (its row cascades away). */
  async save(accountId: string, instanceId: string, record: SetupRecord): Promise<void> {
    const data = { steps: record.steps as Prisma.InputJsonValue, output: record.output, outputTruncated: record.outputTruncated };
    try {
      await this.db.instanceSetup.upsert({ where: { instanceId }, create: { instanceId, accountId, ...data }, update: data });
    } catch (error) {
      if ((error as { code?: string }).code === 'P2003' || (error as { code?: string }).code === 'P2025') return; // the instance is gone
      throw error;
    }
  }

  /** At start: setups a stopped service left pending or running never finish; they are failed. Host-wide. */
  async failInterrupted(reason: string): Promise<number> {
    const { count } = await this.db.instance.updateMany({
      where: { setupStatus: { in: ['pending', 'running'] } },
      data: { setupStatus: 'failed', setupError: reason },
    });
    return count;
  }
}
