// The events page's feed: the newest matching events (GET /v1/events with `tail`), then every new one
// the console's shared live stream brings (useAccountEvents), newest first.
//
// The shared stream starts at its own cursor, which may be later than the one our `tail` read ended
// at; sequences are per account and have no holes, so a live event more than one past our cursor
// means some arrived in between, and one read `after` our cursor fills the gap.
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, ok, type ApiError } from '../../api';
import { useAccountEvents, type AccountEvent } from '../../events';
import { asApiError } from '../../ui/kit';

export interface EventFilter {
  resourceType: string | null;
  resourceId: string | null;
}

const FIRST_TAIL = 50;
const MAX_TAIL = 200; // the most one `tail` read returns; the API has no cursor to read further back
const KEPT = 1000; // a tab left open on the page keeps this many at most

export interface EventFeed {
  events: AccountEvent[] | undefined;
  error: ApiError | null;
  /** Older matching events are kept before the oldest shown. */
  hasOlder: boolean;
  /** Whether one more `tail` read can reach further back. */
  canLoadOlder: boolean;
  loadingOlder: boolean;
  loadOlder(): void;
}

export function useEventFeed(filter: EventFilter): EventFeed {
  const [events, setEvents] = useState<AccountEvent[] | undefined>(undefined);
  const [error, setError] = useState<ApiError | null>(null);
  const [older, setOlder] = useState({ hasOlder: false, tail: FIRST_TAIL, loading: false });
  const cursor = useRef<number | null>(null);
  const catchUpChain = useRef(Promise.resolve());
  const catchUpQueued = useRef(false);
  const query = { resource_type: filter.resourceType ?? undefined, resource_id: filter.resourceId ?? undefined };

  const matches = (event: AccountEvent) =>
    (!filter.resourceType || event.resource_type === filter.resourceType) && (!filter.resourceId || event.resource_id === filter.resourceId);

  const merge = (incoming: AccountEvent[]) =>
    setEvents((previous) => {
      const bySequence = new Map((previous ?? []).map((event) => [event.sequence, event]));
      for (const event of incoming) bySequence.set(event.sequence, event);
      return [...bySequence.values()].sort((a, b) => b.sequence - a.sequence).slice(0, KEPT);
    });

  const readTail = async (tail: number) => {
    const page = await ok(api.GET('/v1/events', { params: { query: { ...query, tail } } }));
    merge(page.data);
    cursor.current = Math.max(cursor.current ?? 0, page.next_cursor);
    return page.has_more;
  };

  // Gap reads run one after another; a gap seen while one waits to start needs no second one.
  const catchUp = () => {
    if (catchUpQueued.current) return;
    catchUpQueued.current = true;
    catchUpChain.current = catchUpChain.current
      .then(async () => {
        catchUpQueued.current = false;
        let more = true;
        while (more && cursor.current !== null) {
          const page = await ok(api.GET('/v1/events', { params: { query: { ...query, after: cursor.current, limit: 200 } } }));
          merge(page.data);
          cursor.current = Math.max(cursor.current, page.next_cursor);
          more = page.has_more;
        }
      })
      .catch((failure: unknown) => setError(asApiError(failure)));
  };

  useEffect(() => {
    readTail(FIRST_TAIL).then(
      (hasOlder) => {
        setOlder((previous) => ({ ...previous, hasOlder }));
        setEvents((previous) => previous ?? []);
      },
      (failure: unknown) => setError(asApiError(failure)),
    );
    // The page gives each filter its own feed (a key), so this runs once.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, []);

  useAccountEvents((event) => {
    if (matches(event)) merge([event]);
    if (cursor.current === null || event.sequence <= cursor.current) return;
    if (event.sequence === cursor.current + 1) cursor.current = event.sequence;
    else catchUp();
  });

  const loadOlder = () => {
    const tail = Math.min(MAX_TAIL, older.tail + FIRST_TAIL);
    setOlder((previous) => ({ ...previous, loading: true }));
    setError(null);
    readTail(tail).then(
      (hasOlder) => setOlder({ hasOlder, tail, loading: false }),
      (failure: unknown) => {
        setError(asApiError(failure));
        setOlder((previous) => ({ ...previous, loading: false }));
      },
    );
  };

  return { events, error, hasOlder: older.hasOlder, canLoadOlder: older.hasOlder && older.tail < MAX_TAIL, loadingOlder: older.loading, loadOlder };
}
