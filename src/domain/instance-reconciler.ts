// Makes the instance rows true again: at start after the service died, and again whenever the host
// of the machines is back after it could not be reached. Running machines are adopted; an
// operation cut short is finished as the caller asked (stop, delete; restart, resume and upgrade
// boot the machine again; a create on the universal image and a fork are made again from the
// start, also when their QEMU still runs, since its identity may be half made) or, where it cannot
// be, rolled back to what the host really has. At start, machine files no row knows are removed
// (no orphans), and only then does the finishing work start, in the background: a fork needs its
// source adopted, and the collection of unused layers must not see the layers it is making.
import { leftStateUnknown, type HostImage, type Machines } from '../compute/machine-host';
import type { Instance, InstanceStore } from '../store/instances';
import type { Clock } from './clock';
import type { InstanceOperations, OperationOutcome } from './instance-operations';
import { stopInputOf } from './operation-input';
import type { LiveReplicas } from './replicas';

/** How long a replica must be seen gone before the orphan pass takes its operations over. */
const OWNER_GONE_GRACE_MS = 30_000;
/** Longer than any machine operation may take on a worker (its own deadline is 15 minutes). */
const OPEN_OPERATION_STALE_MS = 30 * 60_000;

export interface ReconcileOptions {
  /** Also remove what no record owns (machines, layers): only at start, before the API serves. */
  cleanUp: boolean;
  /**
   * Only rows whose operation has been open for longer than any runs (OPEN_OPERATION_STALE_MS): the
   * periodic pass that finishes what a worker's end cut short when no return of it did. Another
   * replica's operation is never that old.
   */
  onlyOpen?: boolean;
  /** Only the machines of this worker (several hosts: the one that answers again). */
  workerId?: string;
  /**
   * Only rows whose open operation no running replica holds: its replica died (kill -9 of a
   * control plane among several), or released it while its host could not be reached. Never this
   * replica's own claims (a request may be between its claim and its work).
   */
  orphaned?: boolean;
}

/** The work of Instances that the reconciler finishes operations with. */
export interface FinishingWork {
  /** The work that finishes a start cut short, or null when it is not one. */
  interruptedWork(row: Instance): ((image: HostImage) => Promise<OperationOutcome>) | null;
  stopOutcome(row: Instance, saveSession: boolean): Promise<OperationOutcome>;
  startableImage(): Promise<HostImage>;
}

type ReconcilerHost = Pick<Machines, 'adopt' | 'destroy' | 'hasSession' | 'removeStrays' | 'removeUnusedLayers'>;

export class InstanceReconciler {
  private reconciling: Promise<void> | null = null;
  /** The passes asked for while one runs, each once (different filters are different passes). */
  private readonly queued = new Map<string, { options: ReconcileOptions; pass: Promise<void> }>();
  /** Replicas seen gone by the orphan pass, since when. */
  private readonly goneSince = new Map<string, number>();

  constructor(
    private readonly store: InstanceStore,
    private readonly operations: InstanceOperations,
    private readonly host: ReconcilerHost,
    private readonly clock: Clock,
    private readonly replicas: LiveReplicas,
    private readonly work: FinishingWork,
  ) {}

  /**
   * One pass (`cleanUp: true` at start). Without the clean-up while the API serves: a machine being
   * made must not look like a stray. Instances with an operation this process runs are left to it,
   * and so are those whose operation another replica that still runs has claimed. A machine whose
   * host cannot be reached is skipped (nothing is rolled back for it; its host's return reconciles
   * it), and then nothing is cleaned up; one pass runs at a time, and one asked for meanwhile
   * follows it.
   */
  reconcile(options: ReconcileOptions = { cleanUp: true }): Promise<void> {
    if (this.reconciling) {
      // The pass under way may have gone past rows this call is about (a worker that came back
      // again meanwhile): one more pass of these options follows it (asked again meanwhile, the same one).
      const key = JSON.stringify([options.cleanUp, options.onlyOpen ?? false, options.workerId ?? null, options.orphaned ?? false]);
      const waiting = this.queued.get(key);
      if (waiting) return waiting.pass;
      const pass = this.reconciling.catch(() => undefined).then(() => {
        this.queued.delete(key);
        return this.reconcile(options);
      });
      this.queued.set(key, { options, pass });
      return pass;
    }
    this.reconciling = this.pass(options).finally(() => {
      this.reconciling = null;
    });
    return this.reconciling;
  }

  private async pass({ cleanUp, onlyOpen = false, workerId, orphaned = false }: ReconcileOptions): Promise<void> {
    const staleBefore = this.clock.now().getTime() - OPEN_OPERATION_STALE_MS;
    const leftOpen = (row: Instance) => row.operation !== null && (row.operationStartedAt?.getTime() ?? 0) < staleBefore;
    const rows = orphaned ? (await this.store.withOpenOperation()).filter((row) => row.operationOwner !== this.replicas.me) : await this.store.all();
    const listed = rows.filter((row) => !this.operations.isRunning(row.id) && (!onlyOpen || leftOpen(row)) && (workerId === undefined || row.workerId === workerId));
    const afterCleanUp: (() => void)[] = [];
    let hostsAway = false;
    const held = (row: Instance) => this.operations.isRunning(row.id) || this.ownClaim(row) || this.anotherReplicaRuns(row, orphaned);
    for (const listedRow of listed) {
      const { id } = listedRow;
      if (await held(listedRow)) continue;
      let unknown = false;
      const alive = await this.host.adopt(id).catch((error: unknown) => {
        // Out of reach, or no answer in time (its worker may be busy with the machine): nothing is
        // concluded from it; a later pass looks again.
        unknown = leftStateUnknown(error);
        return false;
      });
      if (unknown) {
        hostsAway = true;
        continue;
      }
      // Read again: while a worker comes back the API serves, and a request may have taken the
      // machine meanwhile; it is then that request's.
      const row = await this.store.findById(id);
      if (!row || (await held(row))) continue;
      if (row.operation === 'delete' || row.desiredState === 'deleted') {
        await this.takeOver(row, async () => {
          await this.host.destroy(row.id);
          return { update: {}, event: { type: 'instance.deleted' }, deleted: true };
        });
        continue;
      }
      if (alive && (row.operation === 'stop' || row.operation === 'expire')) {
        // The stop the caller asked for is finished, not undone: with the memory saved when the
        // caller asked for it (or an expiry), and a session whose save had completed is kept.
        const saveSession = row.operation === 'expire' || stopInputOf(row.operationInput)?.save_session === true || (await this.host.hasSession(row.id));
        await this.takeOver(row, () => this.work.stopOutcome(row, saveSession));
        continue;
      }
      const madeAgain = row.operation === 'create' || row.operation === 'fork';
      const finishWork = row.desiredState === 'running' && (!alive || madeAgain) ? this.work.interruptedWork(row) : null;
      if (finishWork) {
        const image = await this.work.startableImage().catch(() => null); // none ready: rolled back below
        if (image) {
          afterCleanUp.push(() => void this.takeOver(row, () => finishWork(image)));
          continue;
        }
      }
      if (row.operation || (row.status === 'running') !== alive) {
        const sessionSaved = !alive && (await this.host.hasSession(row.id));
        await this.takeOver(row, async () =>
          alive
            ? { update: { status: 'running', desiredState: 'running' }, event: row.status === 'running' ? null : { type: 'instance.running', data: { adopted: true } } }
            : row.operation === 'create' || row.operation === 'fork'
              ? { update: { status: 'error', errorMessage: 'interrupted by a service restart' }, event: { type: 'instance.error', data: { message: 'interrupted by a service restart' } } }
              : { update: { status: 'stopped', desiredState: 'stopped', sessionSaved }, event: { type: 'instance.stopped', data: { session_saved: sessionSaved, reason: 'service_restart' } } },
        );
      }
    }
    if (cleanUp && !hostsAway) {
      await this.host.removeStrays((await this.store.all()).map((row) => row.id)); // no machine runs that no record owns
      await this.host.removeUnusedLayers();
    }
    for (const finish of afterCleanUp) finish();
  }

  /**
   * This replica's own claim that no work of it runs: a request between its claim and its work.
   * Left to it (released claims have no owner).
   */
  private ownClaim(row: Instance): boolean {
    return row.operation !== null && row.operationOwner === this.replicas.me;
  }

  /**
   * An operation claimed by another replica that still runs: that replica finishes it. With
   * `grace` (the periodic pass over orphaned operations), a replica that does not run counts as gone
   * only once it has not for OWNER_GONE_GRACE_MS: its presence may be lost for a moment (a blip of
   * its database connection) while its work runs on.
   */
  private async anotherReplicaRuns(row: Instance, grace = false): Promise<boolean> {
    const owner = row.operationOwner;
    if (row.operation === null || owner === null || owner === this.replicas.me) return false;
    if (await this.replicas.isAlive(owner)) {
      this.goneSince.delete(owner);
      return true;
    }
    if (!grace) return false;
    const now = this.clock.now().getTime();
    const since = this.goneSince.get(owner) ?? now;
    this.goneSince.set(owner, since);
    if (this.goneSince.size > 1000) this.goneSince.delete(this.goneSince.keys().next().value!);
    return now - since < OWNER_GONE_GRACE_MS;
  }

  /**
   * Runs the reconciler's work on a row: an open operation is its to finish (no request holds it:
   * a new one gets K05); a row without one is claimed first, so that a request arriving meanwhile
   * and the reconciler never act on one machine at once (whoever claims second leaves it).
   */
  private async takeOver(row: Instance, work: () => Promise<OperationOutcome>): Promise<void> {
    if (row.operation) {
      // Another replica may be taking it over at the same time (both saw its owner gone): one does.
      if (await this.operations.takeOver(row)) await this.operations.run(row, work);
      return;
    }
    const claimed = await this.operations.claimIfFree(row, 'reconcile');
    if (claimed) await this.operations.run(claimed, work);
  }
}

