// The job queue on PostgreSQL: pg-boss (its own schema, `kiste_jobs`), worked by every control-plane
// replica. pg-boss hands each job to one replica; a keyed job waits at most once (the `short`
// policy: one queued per key; `stately` would also hold one running per key, but pg-boss 10's fetch
// then stops at a key whose slot is taken and holds back every other key's jobs behind it); a
// replica that dies with a job in hand leaves it to expire (pg-boss looks every few minutes) and be
// run again elsewhere; failures are tried again with a doubling delay.
// A send NOTIFYs `kiste_jobs` with the job's name, so the replicas' LISTEN connections fetch at
// once; each also looks every few seconds, so a lost notification costs only that wait.
import PgBoss from 'pg-boss';
import { Client } from 'pg';
import { JOB_NAMES, JOB_RETRIES, JOB_RETRY_DELAY_S, type JobName, type JobQueue } from '../domain/job-queue';

export const JOBS_CHANNEL = 'kiste_jobs';
const SCHEMA = 'kiste_jobs';
/** A job whose replica went away is run again after this long (longer than any reconcile pass). */
const EXPIRE_S = 30 * 60;
/** How often each replica looks for jobs without a notification. */
const LOOK_MS = 5_000;

export class PgBossQueue implements JobQueue {
  private boss: PgBoss | null = null;
  private listener: Client | null = null;
  private readonly handlers = new Map<JobName, (data: unknown) => Promise<void>>();
  /** Per job name: the fetching loop under way, and whether it should look once more when done. */
  private readonly loops = new Map<JobName, { running: Promise<void>; again: boolean }>();
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;

  constructor(
    private readonly url: string,
    private readonly logger: { warn(object: object, message: string): void },
    private readonly lookMs = LOOK_MS,
  ) {}

  work(name: JobName, handler: (data: unknown) => Promise<void>): void {
    this.handlers.set(name, handler);
  }

  async start(): Promise<void> {
    const boss = new PgBoss({ connectionString: this.url, schema: SCHEMA, schedule: false, max: 3, application_name: 'kiste-jobs' });
    boss.on('error', (error) => this.logger.warn({ err: error }, 'the job queue reported an error'));
    await boss.start();
    for (const name of JOB_NAMES) {
      await boss.createQueue(name, { name, policy: 'short', retryLimit: JOB_RETRIES, retryDelay: JOB_RETRY_DELAY_S, retryBackoff: true, expireInSeconds: EXPIRE_S });
    }
    this.boss = boss;
    if (this.handlers.size === 0) return; // sends only (the admin)
    await this.listen();
    const look = () => {
      for (const name of this.handlers.keys()) this.wake(name);
      if (!this.stopped) this.timer = setTimeout(look, this.lookMs).unref();
    };
    look();
  }

  async send(name: JobName, data: Record<string, string | null>, options: { key?: string } = {}): Promise<void> {
    const boss = this.boss;
    if (!boss || this.stopped) return;
    // null: one of the key waits already (the short policy's unique index); that one will do.
    await boss.send(name, data, { ...(options.key === undefined ? {} : { singletonKey: options.key }) });
    await boss.getDb().executeSql('SELECT pg_notify($1, $2)', [JOBS_CHANNEL, name]);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.listener?.end().catch(() => undefined);
    await Promise.all([...this.loops.values()].map((loop) => loop.running));
    await this.boss?.stop({ graceful: false, wait: true, close: true }).catch(() => undefined);
  }

  /** One LISTEN connection; lost, it is made again (the periodic look covers the gap). */
  private async listen(): Promise<void> {
    if (this.stopped) return;
    const client = new Client({ connectionString: this.url });
    client.on('notification', (message) => {
      const name = JOB_NAMES.find((known) => known === message.payload);
      if (name && this.handlers.has(name)) this.wake(name);
    });
    const again = () => {
      if (this.listener !== client) return;
      this.listener = null;
      client.removeAllListeners('end');
      if (!this.stopped) setTimeout(() => void this.listen(), 1000).unref();
    };
    client.on('error', again);
    client.on('end', again);
    try {
      await client.connect();
      await client.query(`LISTEN ${JOBS_CHANNEL}`);
      if (this.stopped) return void (await client.end().catch(() => undefined)); // stopped meanwhile
      this.listener = client;
    } catch (error) {
      this.logger.warn({ err: error }, 'the job queue\'s LISTEN connection failed; looking every few seconds meanwhile');
      await client.end().catch(() => undefined);
      if (!this.stopped) setTimeout(() => void this.listen(), 1000).unref();
    }
  }

  /** Fetches and runs this name's jobs until none is due (one loop per name; a wake meanwhile makes it look once more). */
  private wake(name: JobName): void {
    const loop = this.loops.get(name);
    if (loop) {
      loop.again = true;
      return;
    }
    const state = { running: Promise.resolve(), again: false };
    state.running = (async () => {
      do {
        state.again = false;
        while (!this.stopped && (await this.runOne(name)));
      } while (state.again && !this.stopped);
    })()
      .catch((error: unknown) => this.logger.warn({ err: error, job: name }, 'jobs could not be fetched'))
      .finally(() => this.loops.delete(name));
    this.loops.set(name, state);
  }

  /** Runs one due job of `name`; false when there was none. */
  private async runOne(name: JobName): Promise<boolean> {
    const boss = this.boss!;
    const [job] = await boss.fetch<unknown>(name, { batchSize: 1 });
    if (!job) return false;
    let failure: unknown = null;
    try {
      await this.handlers.get(name)!(job.data);
    } catch (error) {
      failure = error;
      this.logger.warn({ err: error, job: name }, 'background job failed; it is tried again later');
    }
    // A job whose end cannot be written stays active until it expires, then runs again.
    await (failure === null ? boss.complete(name, job.id) : boss.fail(name, job.id, { message: String(failure instanceof Error ? failure.message : failure).slice(0, 500) }))
      .catch((error: unknown) => this.logger.warn({ err: error, job: name }, 'the end of a background job could not be written; it runs again once it expires'));
    return true;
  }
}
