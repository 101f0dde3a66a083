// Appends to an account's durable event stream inside the caller's transaction: the account row's
// counter is bumped first (a row lock on PostgreSQL, the write lock on SQLite), so sequences have
// no gaps and follow commit order.
import { newId } from '../domain/secrets';
import type { Tx } from './prisma';

export interface NewEvent {
  type: string;
  resourceType: string;
  resourceId: string;
  data: Record<string, unknown>;
}

export async function appendEvent(tx: Tx, accountId: string, event: NewEvent): Promise<bigint> {
  const { eventSequence } = await tx.account.update({
    where: { id: accountId },
    data: { eventSequence: { increment: 1 } },
    select: { eventSequence: true },
  });
  await tx.event.create({
    data: { id: newId(), accountId, sequence: eventSequence, ...event, data: event.data as object },
  });
  return eventSequence;
}
