// Webhook endpoints and their delivery outbox. Every query about an endpoint takes the account id;
// the delivery worker's queries (due deliveries of every account) work by delivery id after that.
import { webhookBody } from '../domain/webhook-payload';
import { newId } from '../domain/secrets';
import type { Transaction } from '../domain/transactions';
import type { Event, Prisma, WebhookDelivery, WebhookEndpoint } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';
import { clientFor } from './transactions';

export type { WebhookDelivery, WebhookEndpoint };

export type DeliveryState = 'pending' | 'retrying' | 'succeeded' | 'failed';
const OPEN_STATES: DeliveryState[] = ['pending', 'retrying'];

export interface NewWebhookEndpoint {
  id: string;
  accountId: string;
  name: string;
  url: string;
  events: string[];
  secretEncrypted: string;
  createdAt: Date;
}

export interface EndpointChanges {
  name?: string;
  url?: string;
  events?: string[];
  enabled?: boolean;
  disabledReason?: string | null;
  updatedAt: Date;
}

export type DeliveryWithEndpoint = WebhookDelivery & { endpoint: WebhookEndpoint };

export interface AttemptRecord {
  state: DeliveryState;
  attempt: number;
  nextAttemptAt: Date | null;
  httpStatus: number | null;
  responseExcerpt: string | null;
  durationMs: number | null;
  error: string | null;
  updatedAt: Date;
}

/** A test delivery: this one endpoint only, already claimed by the caller until `claimedUntil`. */
export interface TestDelivery {
  endpointId: string;
  claimedUntil: Date;
}

function subscribes(endpoint: { events: unknown }, type: string): boolean {
  return Array.isArray(endpoint.events) && endpoint.events.includes(type);
}

/**
 * The outbox write of appendEvent: a delivery for every enabled endpoint of the account that
 * subscribes to the event's type (one query on the account's endpoints, at most a handful), in the
 * event's transaction. Pending deliveries with no next_attempt_at are due at once.
 */
export async function queueWebhookDeliveries(tx: Transaction, event: Event, test?: TestDelivery): Promise<void> {
  const client = clientFor(tx);
  const endpoints = await client.webhookEndpoint.findMany({
    where: test ? { accountId: event.accountId, id: test.endpointId } : { accountId: event.accountId, enabled: true },
    select: { id: true, events: true },
  });
  const targets = test ? endpoints : endpoints.filter((endpoint) => subscribes(endpoint, event.type));
  if (targets.length === 0) return;
  const body = webhookBody(event);
  await client.webhookDelivery.createMany({
    data: targets.map((endpoint) => ({
      id: newId(),
      accountId: event.accountId,
      endpointId: endpoint.id,
      eventType: event.type,
      eventSequence: event.sequence,
      body,
      state: 'pending',
      attempt: 0,
      nextAttemptAt: test ? test.claimedUntil : null,
      createdAt: event.createdAt,
    })),
  });
}

/** Due: open, and either never scheduled (new) or scheduled for now or earlier. */
function due(now: Date): Prisma.WebhookDeliveryWhereInput {
  return { state: { in: OPEN_STATES }, OR: [{ nextAttemptAt: null }, { nextAttemptAt: { lte: now } }] };
}

export class WebhookStore {
  constructor(private readonly db: Db) {}

  // ---- endpoints ----

  list(accountId: string): Promise<WebhookEndpoint[]> {
    return this.db.webhookEndpoint.findMany({ where: { accountId }, orderBy: [{ createdAt: 'asc' }, { id: 'asc' }] });
  }

  count(accountId: string, tx?: Transaction): Promise<number> {
    return clientFor(tx, this.db).webhookEndpoint.count({ where: { accountId } });
  }

  find(accountId: string, id: string, tx?: Transaction): Promise<WebhookEndpoint | null> {
    return clientFor(tx, this.db).webhookEndpoint.findFirst({ where: { accountId, id } });
  }

  create(tx: Transaction, endpoint: NewWebhookEndpoint): Promise<WebhookEndpoint> {
    return clientFor(tx).webhookEndpoint.create({ data: { ...endpoint, updatedAt: endpoint.createdAt } });
  }

  async update(tx: Transaction, accountId: string, id: string, changes: EndpointChanges): Promise<WebhookEndpoint | null> {
    const { count } = await clientFor(tx).webhookEndpoint.updateMany({ where: { accountId, id }, data: changes });
    return count === 1 ? this.find(accountId, id, tx) : null;
  }

  /** Deletes the endpoint; its deliveries go with it (cascade). */
  async delete(tx: Transaction, accountId: string, id: string): Promise<boolean> {
    const { count } = await clientFor(tx).webhookEndpoint.deleteMany({ where: { accountId, id } });
    return count === 1;
  }

  /** Gives up the endpoint's open deliveries (it was disabled). */
  stopOpenDeliveries(tx: Transaction, endpointId: string, error: string, now: Date): Promise<{ count: number }> {
    return clientFor(tx).webhookDelivery.updateMany({
      where: { endpointId, state: { in: OPEN_STATES } },
      data: { state: 'failed', nextAttemptAt: null, error, updatedAt: now },
    });
  }

  /** After a failed attempt: the endpoint's health; returns it (null when it was deleted meanwhile). Successes: recordSuccess. */
  async recordFailure(tx: Transaction, endpointId: string, now: Date): Promise<WebhookEndpoint | null> {
    const client = clientFor(tx);
    const { count } = await client.webhookEndpoint.updateMany({
      where: { id: endpointId },
      data: { lastDeliveryAt: now, consecutiveFailures: { increment: 1 } },
    });
    return count === 1 ? client.webhookEndpoint.findUnique({ where: { id: endpointId } }) : null;
  }

  // ---- deliveries ----

  /** The last `take` deliveries of an endpoint of this account, newest first. */
  listDeliveries(accountId: string, endpointId: string, take: number): Promise<WebhookDelivery[]> {
    return this.db.webhookDelivery.findMany({
      where: { accountId, endpointId },
      orderBy: [{ createdAt: 'desc' }, { eventSequence: 'desc' }, { id: 'desc' }],
      take,
    });
  }

  findDeliveryOf(tx: Transaction, endpointId: string, eventSequence: bigint): Promise<WebhookDelivery | null> {
    return clientFor(tx).webhookDelivery.findFirst({ where: { endpointId, eventSequence } });
  }

  findDelivery(id: string): Promise<DeliveryWithEndpoint | null> {
    return this.db.webhookDelivery.findUnique({ where: { id }, include: { endpoint: true } });
  }

  /** Due deliveries of every account, the longest-waiting first. */
  dueDeliveries(now: Date, take: number): Promise<DeliveryWithEndpoint[]> {
    return this.db.webhookDelivery.findMany({
      where: due(now),
      orderBy: [{ nextAttemptAt: 'asc' }, { createdAt: 'asc' }],
      take,
      include: { endpoint: true },
    });
  }

  /**
   * Takes a due delivery for one attempt, safely across processes: the conditional update moves
   * next_attempt_at to the end of the lease, so no other worker sees it due until then (a worker
   * that dies mid-attempt leaves it to be retried after the lease). False when another took it.
   */
  async claim(delivery: WebhookDelivery, now: Date, leaseUntil: Date): Promise<boolean> {
    const { count } = await this.db.webhookDelivery.updateMany({
      where: { id: delivery.id, attempt: delivery.attempt, ...due(now) },
      data: { nextAttemptAt: leaseUntil },
    });
    return count === 1;
  }

  /**
   * A successful attempt and the endpoint's health, in one batch transaction (the common path:
   * no read-back needed; when the delivery was deleted meanwhile neither row is there to change).
   */
  async recordSuccess(id: string, claimedAttempt: number, endpointId: string, record: AttemptRecord): Promise<void> {
    await this.db.$transaction([
      this.db.webhookDelivery.updateMany({ where: { id, attempt: claimedAttempt, state: { in: OPEN_STATES } }, data: record }),
      this.db.webhookEndpoint.updateMany({
        where: { id: endpointId },
        data: { lastDeliveryAt: record.updatedAt, lastSuccessAt: record.updatedAt, consecutiveFailures: 0 },
      }),
    ]);
  }

  /** Records an attempt of a delivery claimed at `claimedAttempt`; false when it is gone or another worker recorded first. */
  async recordAttempt(tx: Transaction, id: string, claimedAttempt: number, record: AttemptRecord): Promise<boolean> {
    const { count } = await clientFor(tx).webhookDelivery.updateMany({ where: { id, attempt: claimedAttempt, state: { in: OPEN_STATES } }, data: record });
    return count === 1;
  }

  getDelivery(id: string): Promise<WebhookDelivery | null> {
    return this.db.webhookDelivery.findUnique({ where: { id } });
  }
}
