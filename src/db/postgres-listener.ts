// One LISTEN connection per process on PostgreSQL: NOTIFYs from any process become in-process
// announcements (event appends; credentials ended or changed). A lost connection is re-made;
// readers also re-read now and then, and cached credentials live one second at most, so a
// notification missed meanwhile costs latency, never events or a revocation.
import { Client } from 'pg';
import { CommitSignal, EVENTS_CHANNEL } from './commit-signal';
import { CREDENTIALS_CHANNEL, type CredentialChanges } from './credential-changes';

export class PostgresListener {
  private client: Client | undefined;
  private closed = false;
  private retry: NodeJS.Timeout | undefined;
  /** Whether a LISTEN has succeeded before (a later one follows a gap). */
  private listened = false;

  constructor(private readonly url: string, private readonly signal: CommitSignal, private readonly credentials: CredentialChanges) {}

  async start(): Promise<void> {
    if (this.closed) return;
    const client = new Client({ connectionString: this.url });
    client.on('notification', (message) => {
      if (!message.payload) return;
      if (message.channel === EVENTS_CHANNEL) this.signal.announce(message.payload);
      else if (message.channel === CREDENTIALS_CHANNEL) this.credentials.deliver(message.payload);
    });
    client.on('error', () => this.reconnect(client));
    client.on('end', () => this.reconnect(client));
    try {
      await client.connect();
      await client.query(`LISTEN ${EVENTS_CHANNEL}; LISTEN ${CREDENTIALS_CHANNEL}`);
      this.client = client;
      if (this.listened) this.credentials.deliverEveryAccount(); // what was announced meanwhile is unknown
      this.listened = true;
      if (this.closed) await client.end().catch(() => undefined);
    } catch {
      this.reconnect(client);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retry);
    await this.client?.end().catch(() => undefined);
  }

  private reconnect(client: Client): void {
    if (this.closed || this.retry) return;
    this.credentials.deliverEveryAccount(); // announcements are missed until the next LISTEN
    if (this.client === client) this.client = undefined;
    client.removeAllListeners('end');
    void client.end().catch(() => undefined);
    this.retry = setTimeout(() => {
      this.retry = undefined;
      void this.start();
    }, 1000);
  }
}
