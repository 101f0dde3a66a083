// Prisma behind the domain's Transactions. A Transaction is Prisma's transaction client itself,
// only typed opaquely while the domain holds it; clientFor turns it back into something to query.
// Store methods take `tx: Transaction` first where they only make sense inside a transaction, and
// `tx?: Transaction` last where they also run on their own.
import type { Transaction, Transactions } from '../domain/transactions';
import type { Db, Tx } from './prisma';

export class PrismaTransactions implements Transactions {
  /** `db` is the database's client (with its commit signal), so commits still wake event readers. */
  constructor(private readonly db: Db) {}

  run<T>(work: (tx: Transaction) => Promise<T>): Promise<T> {
    return this.db.$transaction((tx) => work(tx as unknown as Transaction));
  }
}

/**
 * The Prisma client a store method queries with: the transaction's, or — where the method may run
 * outside one and none was given — the store's own client.
 */
export function clientFor(tx: Transaction): Tx;
export function clientFor(tx: Transaction | undefined, db: Db): Tx | Db;
export function clientFor(tx: Transaction | undefined, db?: Db): Tx | Db {
  return tx === undefined ? db! : (tx as unknown as Tx);
}
