// Background jobs that any control-plane replica may run, each exactly once at a time (issue 22):
// on PostgreSQL a pg-boss queue that every replica works (src/db/pg-boss-queue.ts, woken by
// NOTIFY), on SQLite, which serves one process, a queue in that process
// (src/jobs/in-process-job-queue.ts). Jobs carry only ids; their handlers read the rest from the
// records, so a job that is run again, or after a crash, does what is due then.

/** The jobs there are. */
export const JOB_NAMES = ['reconcile-worker'] as const;
export type JobName = (typeof JOB_NAMES)[number];

/** How often a failed job is tried again, and after how long (doubling each time). */
export const JOB_RETRIES = 5;
export const JOB_RETRY_DELAY_S = 5;

export interface JobQueue {
  /**
   * Queues a job. With `key`, at most one job of that name and key waits to be run: asking again
   * meanwhile adds nothing. (One asked for while another runs is run as well: the work of a job is
   * derived from the records, so it sees what the first one did. The in-process queue runs them one
   * after the other; pg-boss may run them in two replicas at once.)
   */
  send(name: JobName, data: Record<string, string | null>, options?: { key?: string }): Promise<void>;
  /** This process runs jobs of `name` once started; a handler that throws is tried again later, JOB_RETRIES times at most. */
  work(name: JobName, handler: (data: unknown) => Promise<void>): void;
  start(): Promise<void>;
  /** Takes no new jobs and waits for the running ones. */
  stop(): Promise<void>;
}
