// Webhook endpoints of an account: create (the signing secret shown once, kept encrypted), list,
// get with delivery health, update, delete, a test delivery, and the last deliveries. Each change
// appends its event in the same transaction; creating one also raises a `webhook_created` alert.
import { randomBytes } from 'node:crypto';
import { KisteError } from '../errors';
import type { AccountStore } from '../store/accounts';
import { raiseAlert } from '../store/alerts';
import { appendEvent } from '../store/events';
import type { EndpointChanges, WebhookDelivery, WebhookEndpoint, WebhookStore } from '../store/webhooks';
import type { Clock } from './clock';
import type { Limits } from './limits';
import type { SecretBox } from './secret-box';
import { newId } from './secrets';
import type { Transactions } from './transactions';
import type { WebhookDeliveries } from './webhook-deliveries';
import { checkWebhookTarget, type Resolver, type TargetRules } from './webhook-target';

export const MAX_EVENT_TYPES = 32;
export const DELIVERIES_LISTED = 50;
export const SECRET_PREFIX = 'whsec_';
/** How long the caller of a test delivery holds it before the worker may take it over. */
const TEST_CLAIM_MS = 60_000;

export type WebhookHealthState = 'healthy' | 'failing' | 'disabled' | 'unknown';

export function healthOf(endpoint: WebhookEndpoint): WebhookHealthState {
  if (!endpoint.enabled) return 'disabled';
  if (endpoint.consecutiveFailures > 0) return 'failing';
  return endpoint.lastDeliveryAt ? 'healthy' : 'unknown';
}

export function eventsOf(endpoint: WebhookEndpoint): string[] {
  return Array.isArray(endpoint.events) ? (endpoint.events as string[]) : [];
}

export interface NewWebhook {
  name: string;
  url: string;
  events: string[];
}

export interface WebhookPatch {
  name?: string | null;
  url?: string | null;
  events?: string[] | null;
  enabled?: boolean | null;
}

export class Webhooks {
  constructor(
    private readonly transactions: Transactions,
    private readonly store: WebhookStore,
    private readonly accounts: AccountStore,
    private readonly limits: Limits,
    private readonly secrets: SecretBox,
    readonly deliveries: WebhookDeliveries,
    private readonly clock: Clock,
    private readonly target: { rules: TargetRules; resolve: Resolver },
  ) {}

  list(accountId: string): Promise<WebhookEndpoint[]> {
    return this.store.list(accountId);
  }

  async get(accountId: string, id: string): Promise<WebhookEndpoint> {
    const endpoint = await this.store.find(accountId, id);
    if (!endpoint) throw new KisteError('N10');
    return endpoint;
  }

  /** The new endpoint and its signing secret (shown this once). */
  async create(accountId: string, request: NewWebhook): Promise<{ endpoint: WebhookEndpoint; secret: string }> {
    const events = checkEvents(request.events);
    const target = await checkWebhookTarget(request.url, this.target.rules, this.target.resolve);
    const id = newId();
    const secret = SECRET_PREFIX + randomBytes(32).toString('base64');
    const url = target.url.href;
    const endpoint = await this.transactions.run(async (tx) => {
      await this.accounts.lockForUpdate(tx, accountId); // two concurrent creates cannot both pass the limit
      if ((await this.store.count(accountId, tx)) >= this.limits.webhooks) {
        throw new KisteError('L06', { message: `An account can have at most ${this.limits.webhooks} webhook endpoints` });
      }
      const created = await this.store.create(tx, {
        id, accountId, name: request.name, url, events, secretEncrypted: this.secrets.seal(secret, id), createdAt: this.clock.now(),
      });
      await appendEvent(tx, accountId, { type: 'webhook.created', resourceType: 'webhook', resourceId: id, data: { name: request.name, url, events } });
      await raiseAlert(tx, accountId, {
        kind: 'webhook_created',
        title: 'A webhook endpoint was created',
        detail: `The webhook endpoint "${request.name}" now receives ${events.join(', ')} at ${url}. If this was not you, delete it and revoke your credentials.`,
        resourceType: 'webhook',
        resourceId: id,
      });
      return created;
    });
    return { endpoint, secret };
  }

  async update(accountId: string, id: string, patch: WebhookPatch): Promise<WebhookEndpoint> {
    const current = await this.get(accountId, id);
    const now = this.clock.now();
    const changes: EndpointChanges = { updatedAt: now };
    const changed: string[] = [];
    if (patch.name != null && patch.name !== current.name) {
      changes.name = patch.name;
      changed.push('name');
    }
    if (patch.url != null) {
      const url = (await checkWebhookTarget(patch.url, this.target.rules, this.target.resolve)).url.href;
      if (url !== current.url) {
        changes.url = url;
        changed.push('url');
      }
    }
    if (patch.events != null) {
      const events = checkEvents(patch.events);
      if (JSON.stringify(events) !== JSON.stringify(eventsOf(current))) {
        changes.events = events;
        changed.push('events');
      }
    }
    if (patch.enabled != null && patch.enabled !== current.enabled) {
      changes.enabled = patch.enabled;
      changes.disabledReason = null;
      changed.push('enabled');
    }
    if (changed.length === 0) return current;
    return this.transactions.run(async (tx) => {
      const updated = await this.store.update(tx, accountId, id, changes);
      if (!updated) throw new KisteError('N10');
      if (changes.enabled === false) await this.store.stopOpenDeliveries(tx, id, 'The endpoint was disabled', now);
      await appendEvent(tx, accountId, {
        type: 'webhook.updated', resourceType: 'webhook', resourceId: id,
        data: { name: updated.name, changed, ...(changes.enabled !== undefined ? { enabled: changes.enabled } : {}) },
      });
      return updated;
    });
  }

  /** Removes the endpoint with its deliveries: nothing more is sent to it. */
  async delete(accountId: string, id: string): Promise<void> {
    await this.transactions.run(async (tx) => {
      const endpoint = await this.store.find(accountId, id, tx);
      if (!endpoint || !(await this.store.delete(tx, accountId, id))) throw new KisteError('N10');
      await appendEvent(tx, accountId, { type: 'webhook.deleted', resourceType: 'webhook', resourceId: id, data: { name: endpoint.name } });
    });
  }

  /** Appends `webhook.test`, delivers it to this endpoint now and returns the delivery after that attempt. */
  async test(accountId: string, id: string): Promise<WebhookDelivery> {
    const endpoint = await this.get(accountId, id);
    const claimedUntil = new Date(this.clock.now().getTime() + TEST_CLAIM_MS);
    const deliveryId = await this.transactions.run(async (tx) => {
      const sequence = await appendEvent(
        tx, accountId,
        { type: 'webhook.test', resourceType: 'webhook', resourceId: id, data: { name: endpoint.name } },
        { webhookTest: { endpointId: id, claimedUntil } },
      );
      const delivery = await this.store.findDeliveryOf(tx, id, sequence);
      if (!delivery) throw new KisteError('N10'); // deleted meanwhile: the event goes too
      return delivery.id;
    });
    const delivered = await this.deliveries.deliverNow(deliveryId);
    if (!delivered) throw new KisteError('N10'); // deleted during the attempt
    return delivered;
  }

  async listDeliveries(accountId: string, id: string): Promise<WebhookDelivery[]> {
    await this.get(accountId, id);
    return this.store.listDeliveries(accountId, id, DELIVERIES_LISTED);
  }
}

function checkEvents(events: string[]): string[] {
  const unique = [...new Set(events)];
  if (unique.length === 0 || unique.length > MAX_EVENT_TYPES || unique.length !== events.length) {
    throw new KisteError('P01', { message: `events must list 1 to ${MAX_EVENT_TYPES} different event types`, param: 'events' });
  }
  return unique;
}
