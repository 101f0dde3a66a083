// Webhook endpoints and deliveries → API shapes. The signing secret is never part of them.
import type { components } from '../src/generated/api';
import { eventsOf, healthOf } from '../src/domain/webhooks';
import type { WebhookDelivery, WebhookEndpoint } from '../src/store/webhooks';
import { iso } from './present';

type Schemas = components['schemas'];

export function presentWebhook(endpoint: WebhookEndpoint): Schemas['WebhookEndpoint'] {
  return {
    id: endpoint.id,
    object: 'webhook_endpoint',
    name: endpoint.name,
    url: endpoint.url,
    events: eventsOf(endpoint) as Schemas['EventType'][],
    enabled: endpoint.enabled,
    created_at: iso(endpoint.createdAt),
    updated_at: iso(endpoint.updatedAt),
    disabled_reason: endpoint.disabledReason,
    health: {
      state: healthOf(endpoint),
      last_delivery_at: iso(endpoint.lastDeliveryAt),
      last_success_at: iso(endpoint.lastSuccessAt),
      consecutive_failures: endpoint.consecutiveFailures,
    },
  };
}

export function presentDelivery(delivery: WebhookDelivery): Schemas['WebhookDelivery'] {
  const open = delivery.state === 'pending' || delivery.state === 'retrying';
  return {
    id: delivery.id,
    object: 'webhook_delivery',
    webhook_id: delivery.endpointId,
    event_type: delivery.eventType as Schemas['EventType'],
    event_sequence: delivery.eventSequence === null ? null : Number(delivery.eventSequence),
    attempt: Math.max(delivery.attempt, 1),
    state: delivery.state as Schemas['WebhookDelivery']['state'],
    http_status: delivery.httpStatus,
    response_excerpt: delivery.responseExcerpt,
    duration_ms: delivery.durationMs,
    error: delivery.error,
    created_at: iso(delivery.createdAt),
    // a new delivery (no time set) is due at once
    next_attempt_at: open ? iso(delivery.nextAttemptAt ?? delivery.createdAt) : null,
  };
}
