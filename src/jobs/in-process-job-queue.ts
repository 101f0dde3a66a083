// The job queue of a service that is the only process on its database (SQLite): jobs run in this
// process, keyed ones taking turns as JobQueue says. Nothing outlives the process, and nothing
// needs to: what a job does is derived from the records, which the service's start reconciles anyway.
import { JOB_RETRIES, JOB_RETRY_DELAY_S, type JobName, type JobQueue } from '../domain/job-queue';

type JobData = Record<string, string | null>;

/** The jobs of one name and key: the one running, and the one waiting for it (with its try). */
interface Lane {
  running: boolean;
  waiting: { data: JobData; attempt: number } | null;
}

export class InProcessJobQueue implements JobQueue {
  private readonly handlers = new Map<JobName, (data: unknown) => Promise<void>>();
  private readonly lanes = new Map<string, Lane>();
  private readonly running = new Set<Promise<void>>();
  private readonly retries = new Set<NodeJS.Timeout>();
  private started = false;
  private stopped = false;
  /** Jobs sent before start(): run once it is called. */
  private early: [JobName, JobData, string | undefined][] = [];

  constructor(private readonly logger: { warn(object: object, message: string): void }, private readonly retryDelayMs = JOB_RETRY_DELAY_S * 1000) {}

  work(name: JobName, handler: (data: unknown) => Promise<void>): void {
    this.handlers.set(name, handler);
  }

  async start(): Promise<void> {
    this.started = true;
    const early = this.early;
    this.early = [];
    for (const [name, data, key] of early) this.dispatch(name, data, key, 0);
  }

  async send(name: JobName, data: JobData, options: { key?: string } = {}): Promise<void> {
    if (this.stopped) return;
    if (!this.started) return void this.early.push([name, data, options.key]);
    this.dispatch(name, data, options.key, 0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const timer of this.retries) clearTimeout(timer);
    this.retries.clear();
    await Promise.all(this.running);
  }

  /** Runs the job now, or (keyed, with one of its key running) as the one that waits. */
  private dispatch(name: JobName, data: JobData, key: string | undefined, attempt: number): void {
    if (this.stopped) return;
    if (key === undefined) return this.attempt(name, data, key, attempt, () => undefined);
    const laneKey = `${name}\u0000${key}`;
    const lane = this.lanes.get(laneKey) ?? { running: false, waiting: null };
    this.lanes.set(laneKey, lane);
    if (lane.running) {
      lane.waiting = { data, attempt }; // one waits; asking again meanwhile adds nothing
      return;
    }
    lane.running = true;
    this.attempt(name, data, key, attempt, () => {
      lane.running = false;
      const waiting = lane.waiting;
      lane.waiting = null;
      if (waiting) this.dispatch(name, waiting.data, key, waiting.attempt);
      else this.lanes.delete(laneKey);
    });
  }

  /** One try; a failure is sent again after a doubling delay, JOB_RETRIES times at most. */
  private attempt(name: JobName, data: JobData, key: string | undefined, attempt: number, done: () => void): void {
    const handler = this.handlers.get(name);
    if (!handler) return done();
    const run = Promise.resolve()
      .then(() => handler(data)) // a handler that throws at once fails like one that rejects
      .catch((error: unknown) => {
        this.logger.warn({ err: error, job: name, attempt }, 'background job failed');
        if (attempt >= JOB_RETRIES || this.stopped) return;
        const timer = setTimeout(() => {
          this.retries.delete(timer);
          this.dispatch(name, data, key, attempt + 1);
        }, this.retryDelayMs * 2 ** attempt);
        timer.unref();
        this.retries.add(timer);
      })
      .finally(() => {
        this.running.delete(run);
        done();
      });
    this.running.add(run);
  }
}
