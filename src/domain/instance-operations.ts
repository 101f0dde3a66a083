// Runs one lifecycle operation of an instance. The operation is claimed on the row first (a second
// one gets 409 K05); its end — new state, cleared claim and the account event — is written in one
// transaction, so the stream never shows a state the row does not have. Callers wait up to a
// bound and answer 202 when the work goes on in the background.
import { cameFromUnreachableHost } from '../compute/machine-host';
import { KisteError } from '../errors';
import { raiseAlert } from '../store/alerts';
import { appendEvent } from '../store/events';
import type { Instance, InstanceStore, InstanceUpdate } from '../store/instances';
import type { Clock } from './clock';
import type { Transactions } from './transactions';

/** `reconcile`: the reconciler makes a row true again (a machine adopted, or found ended). */
export type LifecycleOperation = 'create' | 'fork' | 'stop' | 'expire' | 'resume' | 'restart' | 'upgrade' | 'delete' | 'reconcile' | 'move';

export interface OperationOutcome {
  /** Row changes at the end (status, session, versions…). */
  update: InstanceUpdate;
  /** The account event that marks the end, with its data. */
  event: { type: string; data?: Record<string, unknown> } | null;
  /** The row is removed (delete). */
  deleted?: boolean;
}

export interface OperationLogger {
  error(object: object, message: string): void;
}

/** Told when an operation ends, from its claim to its last write (the service's metrics). */
export interface OperationObserver {
  operationEnded(operation: string, outcome: 'ok' | 'error', seconds: number): void;
}

export class InstanceOperations {
  private readonly inFlight = new Map<string, Promise<Instance | null>>();

  constructor(
    private readonly transactions: Transactions,
    private readonly store: InstanceStore,
    private readonly clock: Clock,
    private readonly logger: OperationLogger,
    /** This control-plane replica: the owner its claims write. */
    readonly owner: string,
    private readonly observer?: OperationObserver,
  ) {}

  /** Claims the instance for `operation` and sets its transitional state; K05 when it is busy. */
  async claim(instance: Instance, operation: LifecycleOperation, transitional: InstanceUpdate): Promise<Instance> {
    if (!(await this.store.claimOperation(instance.accountId, instance.id, operation, this.clock.now(), this.owner))) {
      throw new KisteError('K05', { message: `Instance ${instance.name} is busy with ${instance.operation ?? 'another operation'}` });
    }
    return this.store.update(instance.id, transitional);
  }

  /** Claims the instance for `operation` unless something holds it (then null); its state is unchanged. */
  async claimIfFree(instance: Instance, operation: LifecycleOperation): Promise<Instance | null> {
    if (!(await this.store.claimOperation(instance.accountId, instance.id, operation, this.clock.now(), this.owner))) return null;
    return this.store.findById(instance.id);
  }

  /** Takes over the row's open operation from the replica that ran it; false when another replica took it first. */
  takeOver(instance: Instance): Promise<boolean> {
    return this.store.takeOperation(instance.id, instance.operation!, instance.operationOwner, this.owner);
  }

  /**
   * Runs claimed work to its end and records it. Never rejects: a failure puts the instance in the
   * error state with an `instance.error` event (and an `instance_error` alert). Resolves with the final row (null once deleted).
   */
  run(instance: Instance, work: () => Promise<OperationOutcome>): Promise<Instance | null> {
    const running: Promise<Instance | null> = this.finish(instance, work).finally(() => {
      if (this.inFlight.get(instance.id) === running) this.inFlight.delete(instance.id); // not a later run's
    });
    this.inFlight.set(instance.id, running);
    return running;
  }

  /** Waits for the operation up to `waitMs`; tells whether it finished in time. */
  async waitAtMost(operation: Promise<Instance | null>, waitMs: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), waitMs);
    });
    try {
      return await Promise.race([operation.then(() => true as const), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Whether this process runs an operation of the instance now (the reconciler leaves it alone). */
  isRunning(instanceId: string): boolean {
    return this.inFlight.has(instanceId);
  }

  /** Operations still running in this process (shutdown waits for them). */
  pending(): Promise<unknown>[] {
    return [...this.inFlight.values()];
  }

  private async finish(instance: Instance, work: () => Promise<OperationOutcome>): Promise<Instance | null> {
    let outcome: OperationOutcome;
    try {
      outcome = await work();
    } catch (error) {
      if (cameFromUnreachableHost(error)) {
        // Not a failure of the machine: the operation stays open (with its goal) and the reconciler
        // finishes it once the host is back. Released, so that the replica whose job reconciles the
        // host's return takes it over, whichever replica that is.
        this.logger.error({ err: error, instance: instance.id, operation: instance.operation }, 'instance operation waits for its host, which cannot be reached now');
        await this.store.releaseOperation(instance.id, this.owner);
        return this.store.findById(instance.id);
      }
      const message = error instanceof Error ? error.message : String(error);
      this.logger.error({ err: error, instance: instance.id, operation: instance.operation }, 'instance operation failed');
      outcome = {
        update: { status: 'error', errorMessage: message.slice(0, 1000) },
        event: { type: 'instance.error', data: { message: message.slice(0, 1000) } },
      };
    }
    if (instance.operation) {
      const claimedAt = instance.operationStartedAt ?? this.clock.now();
      const outcomeKind = outcome.event?.type === 'instance.error' ? 'error' : 'ok';
      this.observer?.operationEnded(instance.operation, outcomeKind, Math.max(0, this.clock.now().getTime() - claimedAt.getTime()) / 1000);
    }
    const lost = Symbol('lost claim');
    return this.transactions.run(async (tx) => {
      // Written only while the claim is still this replica's: one that took it over (this one was
      // thought gone) finishes it, and this end must then change nothing, its event included.
      const owned = outcome.deleted
        ? await this.store.finishOwned(tx, instance.id, this.owner, { deleted: true })
        : await this.store.finishOwned(tx, instance.id, this.owner, { update: outcome.update });
      if (!owned) throw lost;
      if (outcome.event) {
        await appendEvent(tx, instance.accountId, {
          type: outcome.event.type,
          resourceType: 'instance',
          resourceId: instance.id,
          data: { name: instance.name, ...outcome.event.data },
        });
        if (outcome.event.type === 'instance.error') {
          const message = String(outcome.event.data?.message ?? 'unknown error');
          await raiseAlert(tx, instance.accountId, {
            kind: 'instance_error',
            title: `Machine ${instance.name} failed`,
            detail: `${instance.operation ? `The ${instance.operation} operation of machine ${instance.name}` : `Machine ${instance.name}`} failed and the machine is now in the error state: ${message}`,
            resourceType: 'instance',
            resourceId: instance.id,
          });
        }
      }
      return outcome.deleted ? null : this.store.findById(instance.id, tx);
    }).catch(async (error: unknown) => {
      if (error !== lost) throw error;
      this.logger.error({ instance: instance.id, operation: instance.operation }, 'another replica took this operation over meanwhile: its end is that replica\'s');
      return this.store.findById(instance.id);
    });
  }
}
