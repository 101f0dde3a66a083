// One LISTEN connection per process on PostgreSQL: NOTIFYs from appends in any process become
// in-process announcements. A lost connection is re-made; readers also re-read now and then, so a
// wake-up missed meanwhile costs latency, never events.
import { Client } from 'pg';
import { CommitSignal, EVENTS_CHANNEL } from './commit-signal';

export class PostgresListener {
  private client: Client | undefined;
  private closed = false;
  private retry: NodeJS.Timeout | undefined;

  constructor(private readonly url: string, private readonly signal: CommitSignal) {}

  async start(): Promise<void> {
    if (this.closed) return;
    const client = new Client({ connectionString: this.url });
    client.on('notification', (message) => {
      if (message.channel === EVENTS_CHANNEL && message.payload) this.signal.announce(message.payload);
    });
    client.on('error', () => this.reconnect(client));
    client.on('end', () => this.reconnect(client));
    try {
      await client.connect();
      await client.query(`LISTEN ${EVENTS_CHANNEL}`);
      this.client = client;
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
    if (this.client === client) this.client = undefined;
    client.removeAllListeners('end');
    void client.end().catch(() => undefined);
    this.retry = setTimeout(() => {
      this.retry = undefined;
      void this.start();
    }, 1000);
  }
}
