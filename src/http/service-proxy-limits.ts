// The bounds of the services' proxy: connections open at once per service and per client of a
// service, requests a minute per service and per client (a client's are counted before the service
// is even looked up), and the bytes carried per service until they are flushed to the database.
// Every map is emptied as its entries run out, so strangers cannot grow them without end.

export const SERVICE_LIMITS = {
  /** Connections open to one service at once. */
  connectionsPerService: 64,
  /** Connections one client address holds to one service at once: one visitor cannot take them all. */
  connectionsPerClient: 16,
  /** Requests (and upgrades) one service takes a minute. */
  requestsPerService: 6000,
  /** Requests one client address makes a minute, to any service (before the lookup: unknown addresses cost too). */
  requestsPerClient: 1200,
};

/** A slot held until the request or stream ends; give it back once with `release`. */
export interface ConnectionSlot {
  release(): void;
}

export class ServiceProxyLimits {
  private readonly open = new Map<string, number>();
  private readonly minutes = new Map<string, { startedAt: number; count: number }>();
  private readonly carried = new Map<string, { in: number; out: number }>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly limits = SERVICE_LIMITS) {
    this.sweeper = setInterval(() => this.sweep(), 60_000).unref();
  }

  /** One more request of the client (any service); false past its budget. */
  clientRequest(client: string): boolean {
    return this.take(`client:${client}`, this.limits.requestsPerClient);
  }

  /** A connection to the service for the client, counted against the service's budget; null when a bound is reached. */
  connect(serviceId: string, client: string, { use = true } = {}): ConnectionSlot | null {
    const service = `service:${serviceId}`;
    const pair = `pair:${serviceId}:${client}`;
    if ((this.open.get(service) ?? 0) >= this.limits.connectionsPerService || (this.open.get(pair) ?? 0) >= this.limits.connectionsPerClient) return null;
    if (!this.take(service, this.limits.requestsPerService)) return null;
    this.add(service, 1);
    this.add(pair, 1);
    if (use) this.count(serviceId, 'in', 0); // used now, even if it carries no byte before the next flush
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        this.add(service, -1);
        this.add(pair, -1);
      },
    };
  }

  /** Bytes carried for the service (looked up on every count: a flush between two counts loses none). */
  count(serviceId: string, direction: 'in' | 'out', bytes: number): void {
    let counts = this.carried.get(serviceId);
    if (!counts) this.carried.set(serviceId, (counts = { in: 0, out: 0 }));
    counts[direction] += bytes;
  }

  /**
   * The bytes counted since the last take, for every service used meanwhile or holding a connection
   * now (with no bytes: it is in use all the same, which keeps its machine from an idle stop);
   * `putBack` them when they could not be stored.
   */
  takeCounts(): Map<string, { in: number; out: number }> {
    const counts = new Map(this.carried);
    this.carried.clear();
    for (const key of this.open.keys()) if (key.startsWith('service:') && !counts.has(key.slice(8))) counts.set(key.slice(8), { in: 0, out: 0 });
    return counts;
  }

  putBack(counts: ReadonlyMap<string, { in: number; out: number }>): void {
    for (const [id, count] of counts) {
      this.count(id, 'in', count.in);
      this.count(id, 'out', count.out);
    }
  }

  stop(): void {
    clearInterval(this.sweeper);
  }

  private take(key: string, limit: number): boolean {
    const now = Date.now();
    const minute = this.minutes.get(key);
    if (!minute || now - minute.startedAt >= 60_000) {
      this.minutes.set(key, { startedAt: now, count: 1 });
      return true;
    }
    return ++minute.count <= limit;
  }

  private add(key: string, delta: number): void {
    const value = (this.open.get(key) ?? 0) + delta;
    if (value > 0) this.open.set(key, value);
    else this.open.delete(key);
  }

  /** Minutes that are over are forgotten. */
  private sweep(): void {
    const now = Date.now();
    for (const [key, minute] of this.minutes) if (now - minute.startedAt >= 60_000) this.minutes.delete(key);
  }
}
