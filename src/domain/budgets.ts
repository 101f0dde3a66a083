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
  /** Forgets windows that ended before `before`. */
  removeBefore(before: Date): Promise<void>;
}

const WINDOW_MS = 60_000;

export class MinuteBudgets {
  private windowStart = 0;
  /** Per key: the shared total as last answered (this process's sent counts included). */
  private shared = new Map<string, number>();
  /** Per key: counted here and not sent yet. */
  private unsent = new Map<string, number>();

  constructor(private readonly now: () => number = Date.now, private readonly sharedCounts: SharedBudgetCounts | null = null) {}

  take(key: string, limit: number): BudgetVerdict {
    const now = this.now();
    const window = this.current(now);
    const unsent = (this.unsent.get(key) ?? 0) + 1;
    this.unsent.set(key, unsent);
    const used = (this.shared.get(key) ?? 0) + unsent;
    const retryAfterSeconds = Math.max(1, Math.ceil((window + WINDOW_MS - now) / 1000));
    return { allowed: used <= limit, retryAfterSeconds, used };
  }

  used(key: string): number {
    return Math.floor(this.now() / WINDOW_MS) * WINDOW_MS === this.windowStart ? (this.shared.get(key) ?? 0) + (this.unsent.get(key) ?? 0) : 0;
  }

  /** Sends this process's new counts to the shared window and learns the totals (no-op on one process). */
  async sync(): Promise<void> {
    if (!this.sharedCounts) return;
    const window = this.current(this.now());
    const sending = this.unsent;
    // Keys counted here this window but idle since: sent with 0, to learn what the others added.
    const keys = new Map([...this.shared.keys()].map((key) => [key, 0]));
    for (const [key, count] of sending) keys.set(key, count);
    if (keys.size === 0) return;
    this.unsent = new Map();
    let totals: Map<string, number>;
    try {
      totals = await this.sharedCounts.add(new Date(window), keys);
    } catch (error) {
      if (window === this.windowStart) for (const [key, count] of sending) this.unsent.set(key, (this.unsent.get(key) ?? 0) + count);
      throw error;
    }
    if (window !== this.windowStart) return; // a new minute began meanwhile: those totals are history
    for (const [key, total] of totals) this.shared.set(key, Math.max(total, this.shared.get(key) ?? 0));
  }

  /** The start of the window `now` is in; a new one forgets the last one's counts. */
  private current(now: number): number {
    const window = Math.floor(now / WINDOW_MS) * WINDOW_MS;
    if (window !== this.windowStart) {
      const previous = this.windowStart;
      this.windowStart = window;
      this.shared = new Map();
      this.unsent = new Map();
      if (this.sharedCounts && previous !== 0) void this.sharedCounts.removeBefore(new Date(window - WINDOW_MS)).catch(() => undefined);
    }
    return window;
  }
}
