// Which control-plane replica runs the periodic jobs that must run once (account deletions, event
// retention, expiry, checkpoints, alert checks): on PostgreSQL the one holding a session-level
// advisory lock on a connection of its own. The others try again every few seconds, so one of
// them takes over within that time when the holder dies or loses its connection (the lock goes
// with the session). On SQLite there is one process, and it always leads.
import { Client } from 'pg';

export interface Leadership {
  /** Whether this process runs the once-only jobs now. */
  held(): boolean;
  close(): Promise<void>;
}

export const SOLE_PROCESS: Leadership = { held: () => true, close: async () => undefined };

/** The advisory lock's key: hashtext of a fixed name, the same in every replica. */
const LOCK_NAME = 'kiste-periodic-jobs';

export class PostgresLeaderLock implements Leadership {
  private client: Client | undefined;
  private leading = false;
  private closed = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly url: string,
    private readonly onChange: (held: boolean) => void = () => undefined,
    private readonly everyMs = 3_000,
  ) {}

  held(): boolean {
    return this.leading;
  }

  /** Tries once now (so a lone replica leads from its start), then every everyMs. */
  async start(): Promise<void> {
    await this.look();
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    this.set(false);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined); // ends the session: the lock is free at once
  }

  /**
   * Not leading: tries to take the lock. Leading: makes sure the session that holds it still
   * answers (a connection a network dropped silently must not leave two leaders: the server frees
   * the lock when it notices, so this replica steps down as soon as its session does not answer).
   */
  private async look(): Promise<void> {
    this.timer = undefined;
    if (this.closed) return;
    let client = this.client;
    try {
      if (!client) {
        client = new Client({ connectionString: this.url, keepAlive: true, keepAliveInitialDelayMillis: 10_000, query_timeout: this.everyMs });
        const current = client;
        current.on('error', () => this.lost(current));
        current.on('end', () => this.lost(current));
        await current.connect();
        if (this.closed) {
          await current.end().catch(() => undefined);
          return;
        }
        this.client = current;
      }
      if (this.leading) await client.query('SELECT 1');
      else {
        const { rows } = await client.query<{ held: boolean }>('SELECT pg_try_advisory_lock(hashtext($1)) AS held', [LOCK_NAME]);
        if (this.closed) return;
        this.set(rows[0]?.held === true); // held for as long as this session lives
      }
    } catch {
      if (client) this.lost(client);
      return;
    }
    this.later();
  }

  /** The session is gone or does not answer: so is the lock (the server frees it with the session). */
  private lost(client: Client): void {
    client.removeAllListeners('end');
    void client.end().catch(() => undefined);
    if (this.client !== client && this.client !== undefined) return; // an older session: nothing of ours now
    this.client = undefined;
    this.set(false);
    this.later();
  }

  private later(): void {
    if (this.closed || this.timer) return;
    this.timer = setTimeout(() => void this.look(), this.everyMs);
  }

  private set(held: boolean): void {
    if (held === this.leading) return;
    this.leading = held;
    this.onChange(held);
  }
}
