// Appends to an account's durable event stream inside the caller's transaction: the account row's
// counter is bumped first (a row lock on PostgreSQL, the write lock on SQLite), so sequences have
// no gaps and follow commit order. The webhook deliveries of the event (the outbox) are made in the
// same transaction.
import { markAppended, EVENTS_CHANNEL } from '../db/commit-signal';
import { newId } from '../domain/secrets';
import type { Transaction } from '../domain/transactions';
import type { Event } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';
import { clientFor } from './transactions';
import { queueWebhookDeliveries, type TestDelivery } from './webhooks';

export type { Event };

export interface NewEvent {
  type: string;
  resourceType: string;
  resourceId: string;
  data: Record<string, unknown>;
}

export interface AppendOptions {
  /** Send the event to this one webhook endpoint only (POST /v1/webhooks/{id}/test). */
  webhookTest?: TestDelivery;
}

export async function appendEvent(tx: Transaction, accountId: string, event: NewEvent, options: AppendOptions = {}): Promise<bigint> {
  const client = clientFor(tx);
  const { eventSequence } = await client.account.update({
    where: { id: accountId },
    data: { eventSequence: { increment: 1 } },
    select: { eventSequence: true },
  });
  const created = await client.event.create({
    data: { id: newId(), accountId, sequence: eventSequence, ...event, data: event.data as object },
  });
  // The webhook outbox: deliveries of this event are made in its transaction (see store/webhooks).
  await queueWebhookDeliveries(tx, created, options.webhookTest);
  // Readers waiting on this account wake once this transaction commits (see commit-signal).
  if (markAppended(accountId).notifyPostgres) await client.$executeRaw`SELECT pg_notify(${EVENTS_CHANNEL}, ${accountId})`;
  return eventSequence;
}

export interface EventQuery {
  after: bigint;
  /** Only events up to here (the account's counter read before: all of them have committed). */
  upTo: bigint;
  limit: number;
  resourceType?: string;
  resourceId?: string;
}

export interface NewestEventQuery {
  /** Only events up to here, as in EventQuery. */
  upTo: bigint;
  limit: number;
  resourceType?: string;
  resourceId?: string;
}

export class EventStore {
  constructor(private readonly db: Db) {}

  /** The account's newest sequence and how far retention has removed events; null when the account is gone. */
  async position(accountId: string): Promise<{ newest: bigint; prunedThrough: bigint } | null> {
    const account = await this.db.account.findUnique({ where: { id: accountId }, select: { eventSequence: true, eventsPrunedThrough: true } });
    return account && { newest: account.eventSequence, prunedThrough: account.eventsPrunedThrough };
  }

  /** Oldest first. */
  list(accountId: string, query: EventQuery): Promise<Event[]> {
    return this.db.event.findMany({
      where: { accountId, sequence: { gt: query.after, lte: query.upTo }, ...resourceFilter(query) },
      orderBy: { sequence: 'asc' },
      take: query.limit,
    });
  }

  /** The newest `limit` events up to `upTo`, newest first. */
  listNewest(accountId: string, query: NewestEventQuery): Promise<Event[]> {
    return this.db.event.findMany({
      where: { accountId, sequence: { lte: query.upTo }, ...resourceFilter(query) },
      orderBy: { sequence: 'desc' },
      take: query.limit,
    });
  }

  /**
   * Host-wide retention: removes events created before `cutoff`, account by account, and records
   * how far each account's stream was cut (cursors older than that get 410 N30). Returns how many.
   */
  async removeOlderThan(cutoff: Date): Promise<number> {
    const groups = await this.db.event.groupBy({ by: ['accountId'], where: { createdAt: { lt: cutoff } }, _max: { sequence: true } });
    let removed = 0;
    for (const group of groups) {
      const through = group._max.sequence;
      if (through === null) continue;
      removed += await this.db.$transaction(async (tx) => {
        const { count } = await tx.event.deleteMany({ where: { accountId: group.accountId, sequence: { lte: through } } });
        await tx.account.updateMany({ where: { id: group.accountId, eventsPrunedThrough: { lt: through } }, data: { eventsPrunedThrough: through } });
        return count;
      });
    }
    return removed;
  }
}

function resourceFilter(query: { resourceType?: string; resourceId?: string }): { resourceType?: string; resourceId?: string } {
  return {
    ...(query.resourceType ? { resourceType: query.resourceType } : {}),
    ...(query.resourceId ? { resourceId: query.resourceId } : {}),
  };
}
