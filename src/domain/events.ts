// The account event stream as readers see it: oldest first after a cursor, optionally filtered, and
// with `waitMs` a long poll that answers as soon as a matching event commits. The events table is
// the truth; a commit announcement (see db/commit-signal) only says "read again", and readers also
// re-read every few seconds, so a missed announcement costs latency, never events.
import type { CommitSignal } from '../db/commit-signal';
import { KisteError } from '../errors';
import type { Event, EventStore } from '../store/events';
import type { Clock } from './clock';

/** How long events are kept; a cursor older than what is left gets 410 N30. */
export const EVENT_RETENTION_DAYS = 30;
/** A waiting reader re-reads this often even without an announcement. */
const SAFETY_REREAD_MS = 5_000;

export interface ReadEvents {
  after: bigint;
  limit: number;
  waitMs: number;
  resourceType?: string;
  resourceId?: string;
  /** Aborted when the reader went away: stop waiting. */
  signal?: AbortSignal;
}

export interface EventPage {
  events: Event[];
  /** Pass as `after` next time: past every event this read covered, matching or not. */
  nextCursor: bigint;
  hasMore: boolean;
}

export class EventStream {
  constructor(
    private readonly store: EventStore,
    private readonly commits: CommitSignal,
    private readonly clock: Clock,
  ) {}

  async read(accountId: string, request: ReadEvents): Promise<EventPage> {
    const deadline = Date.now() + request.waitMs;
    for (;;) {
      // Listen before reading: an event committed between the read and the wait still wakes us.
      const woken = this.nextAnnouncement(accountId);
      try {
        const page = await this.readOnce(accountId, request);
        const left = deadline - Date.now();
        if (page.events.length > 0 || left <= 0 || request.signal?.aborted) return page;
        await woken.wait(Math.min(left, SAFETY_REREAD_MS), request.signal);
      } finally {
        woken.cancel();
      }
    }
  }

  private async readOnce(accountId: string, request: ReadEvents): Promise<EventPage> {
    const position = await this.store.position(accountId);
    if (!position) throw new KisteError('A01');
    if (request.after > 0n && request.after < position.prunedThrough) {
      throw new KisteError('N30', {
        message: `Events up to ${position.prunedThrough} are no longer kept (${EVENT_RETENTION_DAYS} days); the cursor ${request.after} is older`,
        param: 'after',
      });
    }
    // A cursor past the newest event (a client's bad value) reads nothing and stays where it is.
    const upTo = position.newest;
    const events = await this.store.list(accountId, { ...request, limit: request.limit + 1, upTo });
    const hasMore = events.length > request.limit;
    const page = hasMore ? events.slice(0, request.limit) : events;
    const nextCursor = hasMore ? page[page.length - 1]!.sequence : upTo > request.after ? upTo : request.after;
    return { events: page, nextCursor, hasMore };
  }

  /** Background: removes events past retention. */
  removeExpired(): Promise<number> {
    return this.store.removeOlderThan(new Date(this.clock.now().getTime() - EVENT_RETENTION_DAYS * 86_400_000));
  }

  private nextAnnouncement(accountId: string): { wait(ms: number, signal?: AbortSignal): Promise<void>; cancel(): void } {
    let wake: () => void = () => undefined;
    let announced = false;
    const onAnnounce = () => {
      announced = true;
      wake();
    };
    this.commits.once(accountId, onAnnounce);
    return {
      wait: (ms, signal) =>
        new Promise<void>((resolve) => {
          if (announced || signal?.aborted) return resolve();
          const timer = setTimeout(finish, ms);
          signal?.addEventListener('abort', finish, { once: true });
          wake = finish;
          function finish() {
            clearTimeout(timer);
            signal?.removeEventListener('abort', finish);
            resolve();
          }
        }),
      cancel: () => this.commits.off(accountId, onAnnounce),
    };
  }
}
