// The webhook delivery worker: at-least-once delivery from the durable outbox (WebhookDelivery rows
// made in the transaction of their event, see store/webhooks). It claims due deliveries with a
// conditional update (safe with several processes on one database), checks the URL rule again,
// signs the stored body per Standard Webhooks and POSTs it to the checked address, then records
// the attempt, the endpoint's health and the next try in one transaction. All state is in the
// table, so a restart loses nothing: a delivery claimed by a process that died is retried when its
// lease ends.
import { createHmac } from 'node:crypto';
import { ANY_ACCOUNT, type CommitSignal } from '../db/commit-signal';
import { raiseAlert } from '../store/alerts';
import { appendEvent } from '../store/events';
import type { DeliveryWithEndpoint, WebhookDelivery, WebhookEndpoint, WebhookStore } from '../store/webhooks';
import type { SendResult, SendWebhook } from '../webhooks/sender';
import type { Clock } from './clock';
import type { SecretBox } from './secret-box';
import type { Transactions } from './transactions';
import { checkWebhookTarget, type Resolver, type TargetRules } from './webhook-target';

/** Delays after failed attempts 1, 2, … (seconds, before jitter): about 3.2 days in all. */
export const RETRY_DELAYS_S = [5, 30, 120, 600, 1_800, 3_600, 7_200, 14_400, 28_800, 43_200, 43_200, 43_200, 43_200, 43_200];
export const MAX_ATTEMPTS = RETRY_DELAYS_S.length + 1;
/** Each delay is multiplied by a random factor in [1 - JITTER, 1 + JITTER). */
export const JITTER = 0.2;
/** A receiver's Retry-After is honoured up to this long. */
export const MAX_RETRY_AFTER_MS = 12 * 3_600_000;
export const ATTEMPT_TIMEOUT_MS = 10_000;
export const EXCERPT_BYTES = 1024;
/** This many failed attempts in a row raise a `webhook_failing` alert. */
export const FAILING_ALERT_AFTER = 5;
/** A claimed delivery is not due for anyone else this long (well beyond one attempt). */
const LEASE_MS = 60_000;
const BATCH = 64;
const CONCURRENCY = 16;

export interface DeliveryOptions {
  rules: TargetRules;
  resolve: Resolver;
  send: SendWebhook;
  /** Extra trusted CA certificates for HTTPS receivers (tests). */
  ca?: string | Buffer | (string | Buffer)[];
  timeoutMs?: number;
  /** [0, 1): jitter source (tests may fix it). */
  random?: () => number;
  userAgent: string;
  logger: { error(object: object, message: string): void };
}

/** The Standard Webhooks signature header value for one attempt. */
export function signWebhook(secret: string, id: string, timestampSeconds: number, body: string): string {
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
  return `v1,${createHmac('sha256', key).update(`${id}.${timestampSeconds}.${body}`).digest('base64')}`;
}

/** Retry-After in seconds or as an HTTP date → milliseconds from `now`; null when absent or unreadable. */
export function parseRetryAfter(value: string | null, now: Date): number | null {
  if (!value) return null;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, at - now.getTime());
}

/** When to try again after failed attempt number `attempt` (1-based); null: give up. */
export function nextAttemptDelayMs(attempt: number, retryAfterMs: number | null, random: () => number): number | null {
  if (attempt >= MAX_ATTEMPTS) return null;
  if (retryAfterMs !== null) return Math.min(Math.max(retryAfterMs, 1000), MAX_RETRY_AFTER_MS);
  const base = RETRY_DELAYS_S[attempt - 1]! * 1000;
  return Math.round(base * (1 - JITTER + 2 * JITTER * random()));
}

async function inPool<T>(items: T[], concurrency: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const lanes = Array.from({ length: Math.min(concurrency, items.length) }, async () => {
    while (next < items.length) await work(items[next++]!);
  });
  await Promise.all(lanes);
}

export class WebhookDeliveries {
  private stopped = false;
  private readonly stopping = new AbortController();

  constructor(
    private readonly transactions: Transactions,
    private readonly store: WebhookStore,
    private readonly secrets: SecretBox,
    private readonly clock: Clock,
    private readonly commits: CommitSignal,
    private readonly options: DeliveryOptions,
  ) {}

  /** Attempts every delivery due now (claimed one by one, sent CONCURRENCY at a time). Returns how many. */
  async runDue(): Promise<number> {
    let attempted = 0;
    for (;;) {
      const now = this.clock.now();
      const batch = await this.store.dueDeliveries(now, BATCH);
      await inPool(batch, CONCURRENCY, async (delivery) => {
        try {
          if (this.stopped || !(await this.store.claim(delivery, now, new Date(now.getTime() + LEASE_MS)))) return;
          await this.attempt(delivery);
          attempted++;
        } catch (error) {
          // e.g. the database went away mid-attempt: the claim runs out and the delivery is tried again
          this.options.logger.error({ err: error, delivery: delivery.id }, 'webhook delivery attempt failed');
        }
      });
      if (batch.length < BATCH || this.stopped) return attempted;
    }
  }

  /**
   * The background loop: runs what is due, then waits up to `idleMs` or until an event commits (a
   * commit may have queued deliveries), until stop(). Errors are logged and retried a second later.
   */
  async runForever(idleMs = 1_000): Promise<void> {
    while (!this.stopped) {
      let woken = this.commits.watch(ANY_ACCOUNT); // before reading: a commit during the run is not missed
      try {
        try {
          await this.runDue();
        } catch (error) {
          this.options.logger.error({ err: error }, 'webhook delivery run failed');
          woken.cancel();
          woken = this.commits.watch(ANY_ACCOUNT); // after a failure, wait for a later commit or idleMs
        }
        await woken.wait(idleMs, this.stopping.signal);
      } finally {
        woken.cancel();
      }
    }
  }

  /** Ends runForever (after the attempts in flight). */
  stop(): void {
    this.stopped = true;
    this.stopping.abort();
  }

  /**
   * Attempts one delivery its caller created already claimed (a test delivery), now, also when the
   * endpoint is disabled; returns the delivery after the attempt.
   */
  async deliverNow(id: string): Promise<WebhookDelivery | null> {
    const delivery = await this.store.findDelivery(id);
    if (!delivery) return null;
    await this.attempt(delivery, { evenWhenDisabled: true });
    return this.store.getDelivery(id);
  }

  private async attempt(delivery: DeliveryWithEndpoint, how: { evenWhenDisabled?: boolean } = {}): Promise<void> {
    const { endpoint } = delivery;
    const attempt = delivery.attempt + 1;
    if (!endpoint.enabled && !how.evenWhenDisabled) {
      await this.transactions.run((tx) =>
        this.store.stopOpenDeliveries(tx, endpoint.id, 'The endpoint is disabled', this.clock.now()),
      );
      return;
    }
    const result = await this.send(delivery, endpoint);
    const now = this.clock.now();
    const succeeded = result.status !== null && result.status >= 200 && result.status < 300;
    const gone = result.status === 410;
    const error = succeeded ? null : result.error ?? describeStatus(result.status!);
    const delay = succeeded || gone ? null : nextAttemptDelayMs(attempt, parseRetryAfter(result.retryAfter, now), this.options.random ?? Math.random);
    const state = succeeded ? 'succeeded' : delay === null ? 'failed' : 'retrying';

    const record = {
      state,
      attempt,
      nextAttemptAt: delay === null ? null : new Date(now.getTime() + delay),
      httpStatus: result.status,
      responseExcerpt: result.excerpt,
      durationMs: result.durationMs,
      error: gone ? `${error}: the endpoint was disabled` : error,
      updatedAt: now,
    } as const;
    if (succeeded) return this.store.recordSuccess(delivery.id, delivery.attempt, endpoint.id, record);
    await this.transactions.run(async (tx) => {
      const recorded = await this.store.recordAttempt(tx, delivery.id, delivery.attempt, record);
      if (!recorded) return; // the endpoint was deleted meanwhile, or another worker recorded this attempt
      const health = await this.store.recordFailure(tx, endpoint.id, now);
      if (!health) return;
      const disabledNow = gone && health.enabled;
      if (disabledNow) {
        const reason = `The receiver answered 410 Gone at ${now.toISOString()}; deliveries stopped.`;
        await this.store.update(tx, health.accountId, health.id, { enabled: false, disabledReason: reason, updatedAt: now });
        await this.store.stopOpenDeliveries(tx, health.id, 'The endpoint was disabled (the receiver answered 410 Gone)', now);
        await appendEvent(tx, health.accountId, {
          type: 'webhook.updated', resourceType: 'webhook', resourceId: health.id,
          data: { name: health.name, changed: ['enabled'], enabled: false, disabled_reason: reason },
        });
      }
      if (disabledNow || health.consecutiveFailures === FAILING_ALERT_AFTER) {
        await raiseAlert(tx, health.accountId, {
          kind: 'webhook_failing',
          title: disabledNow ? 'A webhook endpoint was disabled' : 'Webhook deliveries are failing',
          detail: disabledNow
            ? `The receiver of the webhook endpoint "${health.name}" (${health.url}) answered 410 Gone, so kiste disabled the endpoint; enable it again with PATCH /v1/webhooks/${health.id}.`
            : `The last ${FAILING_ALERT_AFTER} delivery attempts to the webhook endpoint "${health.name}" (${health.url}) failed; the latest: ${error}.`,
          resourceType: 'webhook',
          resourceId: health.id,
        });
      }
    });
  }

  private async send(delivery: WebhookDelivery, endpoint: WebhookEndpoint): Promise<SendResult> {
    let target;
    try {
      target = await checkWebhookTarget(endpoint.url, this.options.rules, this.options.resolve);
    } catch (error) {
      return { status: null, retryAfter: null, excerpt: null, durationMs: 0, error: `Not sent: ${(error as Error).message}` };
    }
    let secret: string;
    try {
      secret = this.secrets.open(endpoint.secretEncrypted, endpoint.id);
    } catch {
      return { status: null, retryAfter: null, excerpt: null, durationMs: 0, error: 'Not sent: the signing secret cannot be decrypted (was KISTE_SECRET_KEY changed?)' };
    }
    const timestamp = Math.floor(this.clock.now().getTime() / 1000);
    return this.options.send({
      target,
      body: delivery.body,
      headers: {
        'content-type': 'application/json',
        'user-agent': this.options.userAgent,
        'webhook-id': delivery.id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signWebhook(secret, delivery.id, timestamp, delivery.body),
      },
      timeoutMs: this.options.timeoutMs ?? ATTEMPT_TIMEOUT_MS,
      excerptBytes: EXCERPT_BYTES,
      ca: this.options.ca,
    });
  }
}

function describeStatus(status: number): string {
  if (status >= 300 && status < 400) return `The receiver answered ${status} (redirects are not followed)`;
  return `The receiver answered ${status}`;
}
