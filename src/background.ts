// Periodic work of a running service: due account deletions, the uptime heartbeat, event retention,
// instance expiry and checkpoints, alert e-mail and the alert checks, webhook deliveries. Each job
// runs again only after its previous run finished; stop() waits for running ones.
import type { Logger } from 'pino';
import type { Services } from './services';

interface Job {
  name: string;
  everyMs: number;
  run(): Promise<unknown>;
  /** For a job whose run() loops by itself: asks it to end (stop() then waits for it). */
  stop?(): void;
}

export class BackgroundJobs {
  private timers: NodeJS.Timeout[] = [];
  private running = new Set<Promise<unknown>>();
  private stopped = false;

  constructor(private readonly jobs: Job[], private readonly logger: Logger) {}

  start(): void {
    for (const job of this.jobs) {
      const tick = () => {
        if (this.stopped) return;
        const run = job.run().catch((error) => this.logger.error({ err: error, job: job.name }, 'background job failed'));
        this.running.add(run);
        void run.finally(() => {
          this.running.delete(run);
          if (!this.stopped) this.timers.push(setTimeout(tick, job.everyMs));
        });
      };
      tick();
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const timer of this.timers) clearTimeout(timer);
    for (const job of this.jobs) job.stop?.();
    await Promise.all(this.running);
  }
}

export function serviceJobs(services: Services, logger: Logger): BackgroundJobs {
  return new BackgroundJobs(
    [
      { name: 'account-deletions', everyMs: 2_000, run: () => services.deletions.runDue() },
      { name: 'heartbeat', everyMs: 60_000, run: () => services.platform.heartbeat() },
      { name: 'event-retention', everyMs: 3_600_000, run: () => services.events.removeExpired() },
      { name: 'instance-expiry', everyMs: 5_000, run: () => services.instances.expireDue() },
      { name: 'instance-checkpoints', everyMs: 10_000, run: () => services.instances.checkpoints.runDue() },
      // loops by itself: what is due every second, at once when an event commits (it may have queued deliveries)
      { name: 'webhook-deliveries', everyMs: 1_000, run: () => services.webhookDeliveries.runForever(1_000), stop: () => services.webhookDeliveries.stop() },
      { name: 'alert-email', everyMs: 5_000, run: () => services.alerts.outbox.run() },
      { name: 'alert-api-keys-expiring', everyMs: 600_000, run: () => services.alerts.checks.apiKeysExpiring() },
      { name: 'alert-disks-almost-full', everyMs: 60_000, run: () => services.alerts.checks.disksAlmostFull() },
    ],
    logger,
  );
}
