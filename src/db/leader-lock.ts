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
  private retry: NodeJS.Timeout | undefined;

  constructor(
    private readonly url: string,
    private readonly onChange: (held: boolean) => void = () => undefined,
    private readonly retryMs = 3_000,
  ) {}

  held(): boolean {
    return this.leading;
  }

  /** Tries once now (so a lone replica leads from its start), then every retryMs until it holds the lock. */
  async start(): Promise<void> {
    await this.attempt();
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retry);
    this.set(false);
    await this.client?.end().catch(() => undefined); // ends the session: the lock is free at once
  }

  private async attempt(): Promise<void> {
    this.retry = undefined;
    if (this.closed) return;
    let client = this.client;
    try {
      if (!client) {
        client = new Client({ connectionString: this.url, keepAlive: true });
        const current = client;
        current.on('error', () => this.lost(current));
        current.on('end', () => this.lost(current));
        await current.connect();
        this.client = current;
      }
      const { rows } = await client.query<{ held: boolean }>('SELECT pg_try_advisory_lock(hashtext($1)) AS held', [LOCK_NAME]);
      if (rows[0]?.held === true) {
        this.set(true); // held for as long as this session lives
        return;
      }
    } catch {
      if (client) this.lost(client);
      return;
    }
    this.later();
  }

  private lost(client: Client): void {
    if (this.client === client) this.client = undefined;
    client.removeAllListeners('end');
    void client.end().catch(() => undefined);
    this.set(false);
    this.later();
  }

  private later(): void {
    if (this.closed || this.retry) return;
    this.retry = setTimeout(() => void this.attempt(), this.retryMs);
  }

  private set(held: boolean): void {
    if (held === this.leading) return;
    this.leading = held;
    this.onChange(held);
  }
}
