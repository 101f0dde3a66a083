// A queue that takes accounts in turn (round robin): the next job is the oldest of the account first
// in line, which then goes to the back of the line. A job waits for at most one job of each other
// account per job of its own account ahead of it, plus one: one account's hundred queued jobs hold
// back another account's job by one of theirs, not by all of them.

export class FairQueue<T> {
  /** Accounts with waiting jobs, in the order of their turn (a Map keeps insertion order). */
  private readonly waiting = new Map<string, T[]>();

  push(accountId: string, job: T): void {
    const jobs = this.waiting.get(accountId);
    if (jobs) jobs.push(job);
    else this.waiting.set(accountId, [job]);
  }

  /** The next job; its account goes to the back of the line (if it has more). */
  shift(): T | undefined {
    const first = this.waiting.entries().next();
    if (first.done) return undefined;
    const [accountId, jobs] = first.value;
    const job = jobs.shift();
    this.waiting.delete(accountId);
    if (jobs.length > 0) this.waiting.set(accountId, jobs);
    return job;
  }

  /** Takes out the waiting jobs `which` picks (the account keeps its place); the ones taken out. */
  remove(which: (job: T) => boolean): T[] {
    const removed: T[] = [];
    for (const [accountId, jobs] of this.waiting) {
      const kept = jobs.filter((job) => !which(job) || (removed.push(job), false));
      if (kept.length === 0) this.waiting.delete(accountId);
      else this.waiting.set(accountId, kept);
    }
    return removed;
  }

  get size(): number {
    let size = 0;
    for (const jobs of this.waiting.values()) size += jobs.length;
    return size;
  }
}
