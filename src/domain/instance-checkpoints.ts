// Automatic checkpoints: every running machine's disk is frozen as a checkpoint each
// `auto_snapshot_seconds`, but only when the guest wrote to it since the last one (the host tells).
// A checkpoint never claims the instance: lifecycle calls are not refused with K05 because of
// one; the host runs them one after the other instead.
import type { Machines } from '../compute/machine-host';
import { appendEvent } from '../store/events';
import type { Instance, InstanceStore } from '../store/instances';
import type { Clock } from './clock';
import type { Transactions } from './transactions';

export class InstanceCheckpoints {
  /** When an instance whose disk had not changed was last looked at (not worth a column). */
  private readonly unchangedAt = new Map<string, number>();

  constructor(
    private readonly transactions: Transactions,
    private readonly store: InstanceStore,
    private readonly host: Pick<Machines, 'checkpoint'>,
    private readonly clock: Clock,
    private readonly logger: { warn(object: object, message: string): void },
  ) {}

  /** Background: checkpoints the running instances whose interval has passed; how many were taken. */
  async runDue(): Promise<number> {
    const now = this.clock.now().getTime();
    let taken = 0;
    const running = await this.store.runningIdle();
    for (const id of this.unchangedAt.keys()) if (!running.some((instance) => instance.id === id)) this.unchangedAt.delete(id);
    for (const instance of running.filter((candidate) => this.isDue(candidate, now))) {
      try {
        if (await this.take(instance)) taken++;
      } catch (error) {
        // The machine may have stopped meanwhile; the next round tries again.
        this.logger.warn({ err: error, instance: instance.id }, 'automatic checkpoint failed');
      }
    }
    return taken;
  }

  private isDue(instance: Instance, now: number): boolean {
    const since = Math.max(instance.lastCheckpointAt?.getTime() ?? instance.createdAt.getTime(), this.unchangedAt.get(instance.id) ?? 0);
    return now - since >= instance.autoSnapshotSeconds * 1000;
  }

  private async take(instance: Instance): Promise<boolean> {
    const { taken } = await this.host.checkpoint(instance.id);
    const at = this.clock.now();
    if (!taken) {
      this.unchangedAt.set(instance.id, at.getTime());
      return false;
    }
    this.unchangedAt.delete(instance.id);
    await this.transactions.run(async (tx) => {
      if (!(await this.store.recordCheckpoint(tx, instance.id, at))) return; // deleted meanwhile
      await appendEvent(tx, instance.accountId, {
        type: 'instance.checkpointed',
        resourceType: 'instance',
        resourceId: instance.id,
        data: { name: instance.name, checkpoint_at: at.toISOString() },
      });
    });
    return true;
  }
}
