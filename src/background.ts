// Periodic work of a running service: due account deletions, the uptime heartbeat, event retention,
// instance expiry and checkpoints, alert e-mail and the alert checks, webhook deliveries, operations
// a compute worker left open or whose control-plane replica died. Each job runs again only after its previous run finished; stop()
// waits for running ones. Jobs that claim each piece of work in the database (deliveries, alert
// e-mail) and the heartbeat run in every control-plane replica; the others only where the
// leadership is held (src/db/leader-lock.ts).
import type { Logger } from 'pino';
import { SOLE_PROCESS, type Leadership } from './db/leader-lock';
import type { Services } from './services';

/** How often a replica that does not lead looks again whether it does (then runs what is due). */
const FOLLOWER_LOOK_MS = 3_000;

interface Job {
  name: string;
  everyMs: number;
  run(): Promise<unknown>;
  /** For a job whose run() loops by itself: asks it to end (stop() then waits for it). */
  stop?(): void;
  /** Safe to run in several replicas at once (it claims its work, or it is about this process). */
  everyReplica?: boolean;
}

export class BackgroundJobs {
  /** Each job's next tick (one per job: a list of every tick ever made grew without end). */
  private timers = new Map<string, NodeJS.Timeout>();
  private running = new Set<Promise<unknown>>();
  private stopped = false;

  constructor(private readonly jobs: Job[], private readonly logger: Logger, private readonly leadership: Leadership = SOLE_PROCESS) {}

  start(): void {
    for (const job of this.jobs) {
      const tick = () => {
        if (this.stopped) return;
        if (!job.everyReplica && !this.leadership.held()) {
          this.timers.set(job.name, setTimeout(tick, Math.min(job.everyMs, FOLLOWER_LOOK_MS)));
          return;
        }
        const run = job.run().catch((error) => this.logger.error({ err: error, job: job.name }, 'background job failed'));
        this.running.add(run);
        void run.finally(() => {
          this.running.delete(run);
          if (!this.stopped) this.timers.set(job.name, setTimeout(tick, job.everyMs));
        });
      };
      tick();
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const timer of this.timers.values()) clearTimeout(timer);
    for (const job of this.jobs) job.stop?.();
    await Promise.all(this.running);
  }
}

/** Operations whose replica died (another control plane among several) or released them: finished by the leader. */
function finishOrphanedOperations(services: Services): Promise<void> {
  if (!services.machineHost.reachable()) return Promise.resolve(); // its return reconciles
  return services.instances.reconcile({ cleanUp: false, orphaned: true });
}

function finishOpenOperations(services: Services): Promise<void> {
  if (!services.machineHost.reachable()) return Promise.resolve(); // its return reconciles
  return services.instances.reconcile({ cleanUp: false, onlyOpen: true });
}

/** Each idle machine is stopped with its memory saved, as its owner's stop would (a busy one is left for the next round). */
export async function stopIdleMachines(services: Services, logger: Pick<Logger, 'warn'>): Promise<void> {
  for (const instance of await services.hostedServices.idleMachines()) {
    await services.instances.stop(instance.accountId, instance.name, true).catch((error: unknown) => {
      logger.warn({ err: (error as Error).message, instance: instance.id }, 'an idle machine of hosted services could not be stopped');
    });
  }
}

export function serviceJobs(services: Services, logger: Logger, leadership: Leadership = SOLE_PROCESS): BackgroundJobs {
  return new BackgroundJobs(
    [
      { name: 'account-deletions', everyMs: 2_000, run: () => services.deletions.runDue() },
      { name: 'heartbeat', everyMs: 60_000, run: () => services.platform.heartbeat(), everyReplica: true },
      // this replica's request counts to the shared windows, and the others' back (PostgreSQL only)
      ...(services.budgets.shared ? [{ name: 'request-budgets', everyMs: 250, run: () => services.budgets.sync(), everyReplica: true }] : []),
      { name: 'event-retention', everyMs: 3_600_000, run: () => services.events.removeExpired() },
      { name: 'instance-expiry', everyMs: 5_000, run: () => services.instances.expireDue() },
      { name: 'instance-checkpoints', everyMs: 10_000, run: () => services.instances.checkpoints.runDue() },
      // loops by itself: what is due every second, at once when an event commits (it may have queued deliveries)
      { name: 'webhook-deliveries', everyMs: 1_000, run: () => services.webhookDeliveries.runForever(1_000), stop: () => services.webhookDeliveries.stop(), everyReplica: true },
      { name: 'alert-email', everyMs: 5_000, run: () => services.alerts.outbox.run(), everyReplica: true },
      { name: 'alert-api-keys-expiring', everyMs: 600_000, run: () => services.alerts.checks.apiKeysExpiring() },
      { name: 'alert-disks-almost-full', everyMs: 60_000, run: () => services.alerts.checks.disksAlmostFull() },
      { name: 'orphaned-operations', everyMs: 10_000, run: () => finishOrphanedOperations(services) },
      { name: 'service-credentials-expiry', everyMs: 3_600_000, run: () => services.serviceAccess.removeExpired() },
      // machines whose hosted services have served no one for their idle time stop, memory saved
      { name: 'service-idle-stops', everyMs: 60_000, run: () => stopIdleMachines(services, logger) },
      // An operation a worker's timeout or end left open, when no return of the worker finished it.
      ...(services.compute.kind !== 'in-process' ? [{ name: 'open-operations', everyMs: 60_000, run: () => finishOpenOperations(services) }] : []),
    ],
    logger,
    leadership,
  );
}
