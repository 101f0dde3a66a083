// The event types and resource types of the account stream, as values the pages can list: generated
// from openapi.yaml (codegen's enumValues), so the lists are the spec's.
import { controlEventResponseResource_typeValues, eventTypeValues } from '../../../../src/generated/api';
import type { Schemas } from '../../api';

export type EventType = Schemas['EventType'];
export type ResourceType = Schemas['ControlEventResponse']['resource_type'];

export const EVENT_TYPES: readonly EventType[] = eventTypeValues;
export const RESOURCE_TYPES: readonly ResourceType[] = controlEventResponseResource_typeValues;

const RESOURCE_LABELS: Record<ResourceType, string> = {
  instance: 'Machines',
  command: 'Commands',
  snapshot: 'Snapshots',
  webhook: 'Webhooks',
  alert: 'Alerts',
  api_token: 'API keys',
  device_key: 'Device keys',
  session: 'Sign-ins',
  account: 'Account',
  image: 'Images',
  environment: 'Environments',
  hosted_service: 'Hosted services',
};

/** What an event type is about: the part before the dot, but for the services' events (`service.*`, about a hosted_service). */
function resourceOf(type: EventType): string {
  const prefix = type.split('.')[0]!;
  return prefix === 'service' ? 'hosted_service' : prefix;
}

export function resourceLabel(type: ResourceType): string {
  return RESOURCE_LABELS[type];
}

/** Event types by what they are about, in the spec's order. */
export function eventTypeGroups(): { resource: ResourceType; types: EventType[] }[] {
  return RESOURCE_TYPES.map((resource) => ({ resource, types: EVENT_TYPES.filter((type) => resourceOf(type) === resource) })).filter((group) => group.types.length > 0);
}
