// Per-minute request budgets, counted in fixed one-minute windows per key (account or address).
// Kept in process memory: a restart forgives the current minute, which is harmless for a budget.
export interface BudgetVerdict {
  allowed: boolean;
  /** Seconds until the window resets (for Retry-After). */
  retryAfterSeconds: number;
  used: number;
}

export class MinuteBudgets {
  private windowStart = 0;
  private counts = new Map<string, number>();

  constructor(private readonly now: () => number = Date.now) {}

  take(key: string, limit: number): BudgetVerdict {
    const now = this.now();
    const window = Math.floor(now / 60_000) * 60_000;
    if (window !== this.windowStart) {
      this.windowStart = window;
      this.counts.clear();
    }
    const used = (this.counts.get(key) ?? 0) + 1;
    this.counts.set(key, used);
    const retryAfterSeconds = Math.max(1, Math.ceil((window + 60_000 - now) / 1000));
    return { allowed: used <= limit, retryAfterSeconds, used };
  }

  used(key: string): number {
    return Math.floor(this.now() / 60_000) * 60_000 === this.windowStart ? (this.counts.get(key) ?? 0) : 0;
  }
}
