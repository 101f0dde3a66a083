// Events: the account's event stream, newest first and following live. The address holds the filter
// (?resource_type=&resource_id=), so a filtered view can be linked to and each resource in the list
// links to its own events.
import { useState } from 'preact/hooks';
import { Link, navigate } from '../router';
import { Button, Field, PageHeader, Time } from '../ui/kit';
import { ListView } from '../ui/paged-list';
import { Table } from '../ui/table';
import { useEventFeed, type EventFilter } from './account/event-feed';
import { RESOURCE_TYPES, resourceLabel } from './account/event-types';
import { eventsHref, shortId } from './account/resource-link';
import type { AccountEvent } from '../events';

export function EventsPage({ query }: { query: URLSearchParams }) {
  const filter: EventFilter = { resourceType: query.get('resource_type') || null, resourceId: query.get('resource_id') || null };
  const key = `${filter.resourceType ?? ''}/${filter.resourceId ?? ''}`;
  return (
    <section>
      <PageHeader title="Events" />
      <p class="lead">Everything that happens in your account, newest first. New events appear as they happen; they are kept 30 days.</p>
      <EventFilterForm key={key} filter={filter} />
      <EventList key={key} filter={filter} />
    </section>
  );
}

function EventFilterForm({ filter }: { filter: EventFilter }) {
  const [resourceType, setResourceType] = useState(filter.resourceType ?? '');
  const [resourceId, setResourceId] = useState(filter.resourceId ?? '');
  const filtered = Boolean(filter.resourceType || filter.resourceId);
  return (
    <form
      class="filter-form"
      role="search"
      aria-label="Filter events"
      onSubmit={(event) => {
        event.preventDefault();
        navigate(eventsHref(resourceType || null, resourceId.trim() || null));
      }}
    >
      <Field label="Resource type" id="event-resource-type">
        <select id="event-resource-type" value={resourceType} onChange={(e) => setResourceType(e.currentTarget.value)}>
          <option value="">Any</option>
          {RESOURCE_TYPES.map((type) => (
            <option key={type} value={type}>
              {resourceLabel(type)} ({type})
            </option>
          ))}
        </select>
      </Field>
      <Field label="Resource id" id="event-resource-id">
        <input id="event-resource-id" maxLength={255} value={resourceId} onInput={(e) => setResourceId(e.currentTarget.value)} />
      </Field>
      <div class="actions">
        <Button type="submit" variant="primary">
          Filter events
        </Button>
        {filtered && <Button onClick={() => navigate('/console/events')}>Clear filter</Button>}
      </div>
    </form>
  );
}

function EventList({ filter }: { filter: EventFilter }) {
  const feed = useEventFeed(filter);
  // The feed grows backwards: "more" is older events, as far as one read reaches.
  const list = { items: feed.events, error: feed.error, hasMore: feed.canLoadOlder, loadingMore: feed.loadingOlder, loadMore: feed.loadOlder };
  return (
    <>
      {feed.events !== undefined && (
        <p class="live" role="status">
          <span class="live-dot" aria-hidden="true" />
          Following new events live
        </p>
      )}
      <ListView list={list} empty={filter.resourceType || filter.resourceId ? 'No events match this filter yet.' : 'No events yet.'} loadingLabel="Loading events…" loadMoreLabel="Load older events">
        {(events) => (
          <Table class="events" label="Events, newest first" columns={['When', 'Event', 'Resource', 'Details']}>
            {events.map((event) => (
              <EventRow key={event.sequence} event={event} />
            ))}
          </Table>
        )}
      </ListView>
      {feed.hasOlder && !feed.canLoadOlder && (
        <p class="hint">
          Older events are kept, but the console shows the newest 200 only. <code>kiste events</code> lists every kept event.
        </p>
      )}
    </>
  );
}

function EventRow({ event }: { event: AccountEvent }) {
  const details = summarize(event.data);
  return (
    <tr>
      <td>
        <Time iso={event.created_at} />
        <span class="hint inline">#{event.sequence}</span>
      </td>
      <td>
        <code>{event.type}</code>
      </td>
      <td>
        <Link href={eventsHref(event.resource_type, event.resource_id)} aria-label={`Events of ${event.resource_type} ${event.resource_id}`}>
          {event.resource_type} <code title={event.resource_id}>{shortId(event.resource_id)}</code>
        </Link>
      </td>
      <td class="details">{details ? <code title={details}>{details}</code> : '—'}</td>
    </tr>
  );
}

/** The event's data on one line: `key: value` pairs, objects as JSON. */
function summarize(data: Record<string, unknown>): string {
  return Object.entries(data)
    .map(([key, value]) => `${key}: ${typeof value === 'string' ? value : JSON.stringify(value)}`)
    .join(', ');
}
