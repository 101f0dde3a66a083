// "An account's event stream grew": the wake-up for long-polling readers (the events table stays
// the truth; a wake-up only says "read again").
//
// In this process: appendEvent marks the account in the transaction's context, and the database
// wrapper below announces it once the transaction has committed — never before, so a reader
// woken by it always finds the event. Across processes on PostgreSQL: appendEvent also queues a
// NOTIFY in the same transaction (PostgreSQL delivers it at commit), which a LISTEN connection of
// every process turns into the same in-process announcement.
import { AsyncLocalStorage } from 'node:async_hooks';
import { EventEmitter } from 'node:events';

export const EVENTS_CHANNEL = 'kiste_events';
/** Event name under which every announcement is emitted too (with the account id): the webhook worker's wake-up. */
export const ANY_ACCOUNT = Symbol('any account');

interface CommitContext {
  provider: 'sqlite' | 'postgresql';
  accounts: Set<string>;
}

const context = new AsyncLocalStorage<CommitContext>();

/** Announces committed appends per account; `on(accountId, …)` to follow one account. */
export class CommitSignal extends EventEmitter {
  constructor() {
    super();
    this.setMaxListeners(0); // one listener per waiting reader
  }

  announce(accountId: string): void {
    this.emit(accountId);
    this.emit(ANY_ACCOUNT, accountId);
  }

  /**
   * Watches for the next announcement of `key` (an account id, or ANY_ACCOUNT). Start watching
   * before reading, so a commit between the read and the wait still wakes the waiter.
   */
  watch(key: string | typeof ANY_ACCOUNT): CommitWatch {
    let wake: () => void = () => undefined;
    let announced = false;
    const onAnnounce = () => {
      announced = true;
      wake();
    };
    this.once(key, onAnnounce);
    return {
      wait: (ms, abort) =>
        new Promise<void>((resolve) => {
          if (announced || abort?.aborted) return resolve();
          const timer = setTimeout(finish, ms);
          abort?.addEventListener('abort', finish, { once: true });
          wake = finish;
          function finish() {
            clearTimeout(timer);
            abort?.removeEventListener('abort', finish);
            resolve();
          }
        }),
      cancel: () => this.off(key, onAnnounce),
    };
  }
}

export interface CommitWatch {
  /** Resolves at the announcement (at once if it came already), after `ms`, or when `abort` fires. */
  wait(ms: number, abort?: AbortSignal): Promise<void>;
  /** Stops watching (always call it). */
  cancel(): void;
}

/** Called inside a transaction that appended to `accountId`'s stream; tells whether to NOTIFY too. */
export function markAppended(accountId: string): { notifyPostgres: boolean } {
  const current = context.getStore();
  current?.accounts.add(accountId);
  return { notifyPostgres: current?.provider === 'postgresql' };
}

/**
 * The Prisma client, with `$transaction(fn)` announcing the accounts it appended to after it
 * committed. Everything else is the client itself (methods bound to it: Prisma keeps private state).
 */
export function withCommitSignal<T extends object>(client: T, provider: CommitContext['provider'], signal: CommitSignal): T {
  const bound = new Map<PropertyKey, unknown>();
  const transaction = (client as unknown as { $transaction: (...args: unknown[]) => Promise<unknown> }).$transaction.bind(client);
  const $transaction = async (...args: unknown[]): Promise<unknown> => {
    if (typeof args[0] !== 'function') return transaction(...args); // batch form: no appends inside
    const accounts = new Set<string>();
    const result = await context.run({ provider, accounts }, () => transaction(...args));
    for (const accountId of accounts) signal.announce(accountId);
    return result;
  };
  return new Proxy(client, {
    get(target, property) {
      if (property === '$transaction') return $transaction;
      const value = Reflect.get(target, property, target) as unknown;
      if (typeof value !== 'function') return value;
      if (!bound.has(property)) bound.set(property, (value as (...args: unknown[]) => unknown).bind(target));
      return bound.get(property);
    },
  });
}
