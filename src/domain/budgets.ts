// Per-minute request budgets, counted in fixed one-minute windows per key (account or address).
// Each process counts in memory, so a request never waits for the database; where several
// control-plane replicas share one (PostgreSQL), each adds its counts to a shared window a few
// times a second (`sync`) and judges by the shared total plus what it has not sent yet, so a key
// gets its budget once across all replicas (at most what arrives between two syncs beyond it). A
// restart forgives what it had not sent, which is harmless for a budget.
export interface BudgetVerdict {
  allowed: boolean;
  /** Seconds until the window resets (for Retry-After). */
  retryAfterSeconds: number;
  used: number;
}

/** The window every replica adds to (a table on PostgreSQL). */
export interface SharedBudgetCounts {
  /** Adds `added` (per key) to the window and answers the window's totals for those keys. */
  add(windowStart: Date, added: Map<string, number>): Promise<Map<string, number>>;
  /** The window's totals for `keys` (a key nobody counted is left out). */
  read(windowStart: Date, keys: string[]): Promise<Map<string, number>>;
  /** Forgets windows that ended before `before`. */
  removeBefore(before: Date): Promise<void>;
}

const WINDOW_MS = 60_000;
/** Keys sent in one sync at most, the busiest first (the rest wait for the next): many addresses must not flood the database. */
const SYNC_MAX_KEYS = 500;

export class MinuteBudgets {
  private windowStart = 0;
  /** Per key: the shared total as last answered (this process's sent counts included). */
  private totals = new Map<string, number>();
  /** Per key: counted here and not sent yet. */
  private unsent = new Map<string, number>();

  constructor(private readonly now: () => number = Date.now, private readonly sharedCounts: SharedBudgetCounts | null = null) {}

  /** Whether there are other replicas' counts to share (and so a sync to run). */
  get shared(): boolean {
    return this.sharedCounts !== null;
  }

  take(key: string, limit: number): BudgetVerdict {
    const now = this.now();
    const window = this.current(now);
    const unsent = (this.unsent.get(key) ?? 0) + 1;
    this.unsent.set(key, unsent);
    const used = (this.totals.get(key) ?? 0) + unsent;
    const retryAfterSeconds = Math.max(1, Math.ceil((window + WINDOW_MS - now) / 1000));
    return { allowed: used <= limit, retryAfterSeconds, used };
  }

  used(key: string): number {
    return Math.floor(this.now() / WINDOW_MS) * WINDOW_MS === this.windowStart ? (this.totals.get(key) ?? 0) + (this.unsent.get(key) ?? 0) : 0;
  }

  /**
   * Sends this process's new counts to the shared window and learns the totals: of the keys sent,
   * and of keys counted here earlier in the window (what the other replicas added since). No-op
   * on one process.
   */
  async sync(): Promise<void> {
    if (!this.sharedCounts) return;
    const window = this.current(this.now());
    const busiest = [...this.unsent].sort((a, b) => b[1] - a[1]);
    const sending = new Map(busiest.slice(0, SYNC_MAX_KEYS));
    this.unsent = new Map(busiest.slice(SYNC_MAX_KEYS));
    const idle = [...this.totals].filter(([key]) => !sending.has(key)).sort((a, b) => b[1] - a[1]).slice(0, SYNC_MAX_KEYS).map(([key]) => key);
    let totals: Map<string, number>;
    try {
      totals = new Map([
        ...(sending.size > 0 ? await this.sharedCounts.add(new Date(window), sending) : []), // all or nothing
        ...(idle.length > 0 ? await this.sharedCounts.read(new Date(window), idle).catch(() => new Map<string, number>()) : []),
      ]);
    } catch (error) {
      if (window === this.windowStart) for (const [key, count] of sending) this.unsent.set(key, (this.unsent.get(key) ?? 0) + count);
      throw error;
    }
    if (window !== this.windowStart) return; // a new minute began meanwhile: those totals are history
    for (const [key, total] of totals) this.totals.set(key, Math.max(total, this.totals.get(key) ?? 0));
  }

  /** The start of the window `now` is in; a new one forgets the last one's counts. */
  private current(now: number): number {
    const window = Math.floor(now / WINDOW_MS) * WINDOW_MS;
    if (window !== this.windowStart) {
      const previous = this.windowStart;
      this.windowStart = window;
      this.totals = new Map();
      this.unsent = new Map();
      if (this.sharedCounts && previous !== 0) void this.sharedCounts.removeBefore(new Date(window - WINDOW_MS)).catch(() => undefined);
    }
    return window;
  }
}
