// Connections the services' proxy holds open (streamed answers, WebSockets): each is looked at again
// every minute and closed once what let it in no longer does — the service deleted or made private,
// the cookie's sign-in ended, the key revoked — on whichever replica carries it.

/** Whether what let a connection in still does. */
export type Recheck = () => Promise<boolean>;

interface OpenConnection {
  recheck: Recheck;
  close(): void;
}

export class OpenConnections {
  private readonly open = new Set<OpenConnection>();

  /** Tracks a connection until the returned function is called (it ended). */
  add(recheck: Recheck, close: () => void): () => void {
    const connection = { recheck, close };
    this.open.add(connection);
    return () => void this.open.delete(connection);
  }

  get size(): number {
    return this.open.size;
  }

  /** Closes every connection that is no longer let in (a failed look counts as not let in only when it says so). */
  async recheckAll(): Promise<number> {
    let closed = 0;
    for (const connection of [...this.open]) {
      const still = await connection.recheck().catch(() => true); // the database away for a moment: kept, looked at again
      if (still || !this.open.has(connection)) continue;
      this.open.delete(connection);
      connection.close();
      closed++;
    }
    return closed;
  }
}
