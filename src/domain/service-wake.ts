// Wake on request (docs/hosted-services.md "Status and lifecycle"): a request for a service whose
// machine is stopped resumes the machine as its owner would (`POST …/resume`: the same claim, the
// account's limits) and waits until it runs. Requests that come meanwhile wait on the same wake; a
// resume claimed elsewhere (another replica, the owner) is waited for, not fought (K05).
import { KisteError } from '../errors';
import type { Instance } from '../store/instances';

/** What a wake needs of the machines. */
export interface WakeMachines {
  resume(accountId: string, name: string): Promise<unknown>;
  findById(id: string): Promise<Instance | null>;
}

export const WAKE_WAIT_MS = 60_000;
const LOOK_EVERY_MS = 250;

export class ServiceWake {
  private readonly waking = new Map<string, Promise<Instance>>();

  constructor(private readonly machines: WakeMachines, private readonly waitMs = WAKE_WAIT_MS) {}

  /** The machine running (resumed by this call or another); a KisteError when it cannot be (limits, a failed start, too long). */
  wake(instance: Instance): Promise<Instance> {
    let waking = this.waking.get(instance.id);
    if (!waking) {
      waking = this.resume(instance).finally(() => this.waking.delete(instance.id));
      this.waking.set(instance.id, waking);
    }
    return waking;
  }

  private async resume(instance: Instance): Promise<Instance> {
    const deadline = Date.now() + this.waitMs;
    // Once a resume of ours is claimed, a stop that follows is its owner's word: not fought.
    let claimed = instance.desiredState !== 'running' ? await this.tryResume(instance) : true;
    for (;;) {
      const now = await this.machines.findById(instance.id);
      if (!now || now.desiredState === 'deleted') throw new KisteError('K03', { message: 'The machine that serves this address is gone' });
      if (now.status === 'running' && !now.operation) return now;
      if (now.status === 'error') throw new KisteError('K03', { message: 'The machine that serves this address could not be started', hint: 'Its owner can look at its console log.' });
      if (now.status === 'stopped' && !now.operation && now.desiredState === 'stopped') {
        if (claimed) throw new KisteError('K03', { message: 'The machine that serves this address was stopped again' });
        // A stop that held the machine when we first asked has finished: ask now.
        claimed = await this.tryResume(now);
      }
      if (Date.now() >= deadline) throw new KisteError('K03', { message: `The machine that serves this address did not start within ${Math.round(this.waitMs / 1000)} seconds`, hint: 'Try again in a moment.' });
      await new Promise((resolve) => setTimeout(resolve, LOOK_EVERY_MS));
    }
  }

  /** Resumes as the owner would; true once claimed. Busy (someone else's operation: a resume under way, a stop finishing): false, waited for by the caller. */
  private async tryResume(instance: Instance): Promise<boolean> {
    try {
      await this.machines.resume(instance.accountId, instance.name);
      return true;
    } catch (error) {
      if (error instanceof KisteError && error.code === 'K05') return false;
      throw error;
    }
  }
}
