// Live updates: one long-poll loop on GET /v1/events per tab, shared by every page that listens. It
// starts at the stream's end (`tail`), then asks with `wait_ms`, so an idle console makes about two
// requests a minute; failures back off. Pages get each new event and refresh what it names.
import { useEffect, useRef } from 'preact/hooks';
import { api, ApiError, ok, type Schemas } from './api';
import { pause } from './visible';

export type AccountEvent = Schemas['ControlEventResponse'];
type Listener = (event: AccountEvent) => void;

const WAIT_MS = 25_000;
const BACKOFF_MS = [1_000, 2_000, 5_000, 10_000, 30_000];

const listeners = new Set<Listener>();
let running: AbortController | null = null;

async function follow(signal: AbortSignal): Promise<void> {
  let cursor: number | null = null;
  let failures = 0;
  while (!signal.aborted) {
    try {
      if (cursor === null) {
        cursor = (await ok(api.GET('/v1/events', { params: { query: { tail: 1 } }, signal }))).next_cursor;
      }
      const page: Schemas['WatchEventsResponse'] = await ok(api.GET('/v1/events', { params: { query: { after: cursor, wait_ms: WAIT_MS, limit: 200 } }, signal }));
      for (const event of page.data) listeners.forEach((listener) => listener(event));
      cursor = page.next_cursor;
      failures = 0;
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof ApiError && error.status === 401) return; // signed out: the session says so
      if (error instanceof ApiError && error.code === 'N30') cursor = null; // the cursor fell out of retention
      const delay = error instanceof ApiError && error.retryAfterSeconds ? error.retryAfterSeconds * 1000 : BACKOFF_MS[Math.min(failures, BACKOFF_MS.length - 1)]!;
      failures += 1;
      await pause(delay, signal); // an unsubscribe ends the wait at once
    }
  }
}

function subscribe(listener: Listener): () => void {
  listeners.add(listener);
  if (!running) {
    running = new AbortController();
    void follow(running.signal);
  }
  return () => {
    listeners.delete(listener);
    if (listeners.size === 0 && running) {
      running.abort();
      running = null;
    }
  };
}

/** Calls `onEvent` for every new account event while the component is shown. */
export function useAccountEvents(onEvent: Listener): void {
  const latest = useRef(onEvent);
  latest.current = onEvent;
  useEffect(() => subscribe((event) => latest.current(event)), []);
}
