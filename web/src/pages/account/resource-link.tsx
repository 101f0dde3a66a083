// A link to what an alert or event is about: its own console page where one is addressed by id, else
// the events of that resource (machine pages are addressed by name, which an id does not give).
import { Link } from '../../router';

const PAGES: Record<string, (id: string) => string> = {
  webhook: (id) => `/console/webhooks/${encodeURIComponent(id)}`,
  api_token: () => '/console/keys',
  device_key: () => '/console/device-keys',
  session: () => '/console/sign-ins',
  alert: () => '/console/alerts',
  account: () => '/console/account',
  image: (id) => `/console/images/${encodeURIComponent(id)}`,
};

/** The events page, filtered by resource type and/or id when given. */
export function eventsHref(resourceType: string | null, resourceId: string | null): string {
  const params = new URLSearchParams();
  if (resourceType) params.set('resource_type', resourceType);
  if (resourceId) params.set('resource_id', resourceId);
  return params.size ? `/console/events?${params}` : '/console/events';
}

/** UUIDs are long: the first part tells them apart on screen (the link's name has all of it). */
export function shortId(id: string): string {
  return /^[0-9a-f]{8}-[0-9a-f-]{27}$/i.test(id) ? `${id.slice(0, 8)}…` : id;
}

export function ResourceLink({ type, id }: { type: string; id: string }) {
  const page = PAGES[type];
  return (
    <Link href={page ? page(id) : eventsHref(type, id)} aria-label={`${type} ${id}`}>
      {type} <code title={id}>{shortId(id)}</code>
    </Link>
  );
}
