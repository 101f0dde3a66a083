// The domain's view of database transactions: it decides where one begins and ends, and the stores
// do the reading and writing inside it. How a transaction is made (Prisma today) stays in src/store.

declare const transactionBrand: unique symbol;

/**
 * An open transaction. Opaque on purpose: the domain can only hand it on to store methods, so every
 * query still goes through a store, and nothing here depends on the database library.
 */
export type Transaction = { readonly [transactionBrand]: 'transaction' };

export interface Transactions {
  /**
   * Runs `work` in one transaction, all or nothing: it commits when `work` resolves and rolls
   * back every write made through `tx` when `work` throws (the error is passed on).
   */
  run<T>(work: (tx: Transaction) => Promise<T>): Promise<T>;
}
