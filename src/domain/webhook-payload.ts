// What a webhook delivery carries (openapi.yaml WebhookPayload): the event as the stream shows it
// (ControlEventResponse), with its type and time beside it. The body is made once, when the
// delivery is queued, and these exact bytes are signed and sent on every attempt.
import type { Event } from '../store/events';

export interface EventRecord {
  sequence: number;
  object: 'event';
  type: string;
  resource_type: string;
  resource_id: string;
  data: unknown;
  created_at: string;
}

export function eventRecord(event: Event): EventRecord {
  return {
    sequence: Number(event.sequence),
    object: 'event',
    type: event.type,
    resource_type: event.resourceType,
    resource_id: event.resourceId,
    data: event.data,
    created_at: event.createdAt.toISOString(),
  };
}

export function webhookBody(event: Event): string {
  return JSON.stringify({ type: event.type, timestamp: event.createdAt.toISOString(), data: eventRecord(event) });
}
