// Which control-plane replicas are alive, for finishing operations: every lifecycle operation names
// the replica that runs it (Instance.operationOwner), and another replica finishes it only once that
// one is gone. On PostgreSQL each replica holds a session-level advisory lock named after its id on a
// connection of its own; the lock goes with the session, so a replica killed with -9 is seen gone as
// soon as the server notices its connection closed. On SQLite there is one control plane: any other
// owner is an earlier run of it.
import { randomUUID } from 'node:crypto';
import { Client } from 'pg';
import type { LiveReplicas } from '../domain/replicas';

export interface ReplicaPresence extends LiveReplicas {
  close(): Promise<void>;
}

const lockName = (id: string) => `kiste-replica:${id}`;

export class SoleReplica implements ReplicaPresence {
  readonly me = randomUUID();

  async isAlive(owner: string): Promise<boolean> {
    return owner === this.me;
  }

  async close(): Promise<void> {}
}

export class PostgresReplicaPresence implements ReplicaPresence {
  readonly me = randomUUID();
  private client: Client | undefined;
  private connecting: Promise<Client> | undefined;
  private closed = false;

  constructor(private readonly url: string, private readonly timeoutMs = 5_000) {}

  /** Takes this replica's lock (before it claims any operation). */
  async start(): Promise<void> {
    await this.session();
  }

  async isAlive(owner: string): Promise<boolean> {
    if (owner === this.me) return true;
    try {
      const client = await this.session();
      const { rows } = await client.query<{ free: boolean }>('SELECT pg_try_advisory_lock(hashtext($1)) AS free', [lockName(owner)]);
      if (rows[0]?.free !== true) return true;
      await client.query('SELECT pg_advisory_unlock(hashtext($1))', [lockName(owner)]);
      return false;
    } catch {
      return true;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retry);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }

  private retry: NodeJS.Timeout | undefined;

  /** Takes the lock again as soon as the database answers (every 2 s until then). */
  private reconnectSoon(): void {
    if (this.closed || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      void this.session().catch(() => this.reconnectSoon());
    }, 2_000);
    this.retry.unref();
  }

  /** The session holding this replica's lock, opened again (and the lock taken again) when it was lost. */
  private session(): Promise<Client> {
    if (this.client) return Promise.resolve(this.client);
    this.connecting ??= (async () => {
      const client = new Client({ connectionString: this.url, keepAlive: true, keepAliveInitialDelayMillis: 10_000, query_timeout: this.timeoutMs });
      const lost = () => {
        if (this.client === client) this.client = undefined;
        void client.end().catch(() => undefined);
        this.reconnectSoon(); // without its lock this replica looks gone to the others
      };
      client.on('error', lost);
      client.on('end', lost);
      try {
        await client.connect();
        // A fresh id: nobody else holds its lock.
        await client.query('SELECT pg_advisory_lock(hashtext($1))', [lockName(this.me)]);
      } catch (error) {
        lost();
        throw error;
      }
      if (this.closed) {
        await client.end().catch(() => undefined);
        throw new Error('closed');
      }
      this.client = client;
      return client;
    })().finally(() => {
      this.connecting = undefined;
    });
    return this.connecting;
  }
}

/** This process's presence among the replicas, its lock taken: on PostgreSQL (`url`) a lock of its own, else the one control plane SQLite has. */
export async function joinReplicas(url: string | undefined): Promise<ReplicaPresence> {
  if (!url) return new SoleReplica();
  const presence = new PostgresReplicaPresence(url);
  await presence.start();
  return presence;
}
