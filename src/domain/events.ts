// The account event stream as readers see it: oldest first after a cursor, optionally filtered, and
// with `waitMs` a long poll that answers as soon as a matching event commits. The events table is
// the truth; a commit announcement (see db/commit-signal) only says "read again", and readers also
// re-read every few seconds, so a missed announcement costs latency, never events. A `tail` read
// answers the newest events instead, with the head as cursor: where a client starts to follow live.
import { ANY_ACCOUNT, type CommitSignal } from '../db/commit-signal';
import { KisteError } from '../errors';
import type { Event, EventStore } from '../store/events';
import type { Clock } from './clock';

/** How long events are kept; a cursor older than what is left gets 410 N30. */
export const EVENT_RETENTION_DAYS = 30;
/** A waiting reader re-reads this often even without an announcement. */
const SAFETY_REREAD_MS = 5_000;
/** How long an account's newest sequence, read while no commit was announced since, answers "nothing new" (below SAFETY_REREAD_MS). */
const HEAD_CACHE_MS = 1_000;

export interface ReadEvents {
  /** Read after this sequence; 0 when omitted. */
  after?: bigint;
  limit: number;
  /** Wait up to this long for a matching event when there is none; 0 when omitted. */
  waitMs?: number;
  /** Instead of reading after `after`: the newest `tail` matching events (not combinable with `after` or `waitMs`). */
  tail?: number;
  resourceType?: string;
  resourceId?: string;
  /** Aborted when the reader went away: stop waiting. */
  signal?: AbortSignal;
}

export interface EventPage {
  events: Event[];
  /** Pass as `after` next time: past every event this read covered, matching or not (a tail read: the newest sequence). */
  nextCursor: bigint;
  /** More matching events after `nextCursor`; on a tail read, older matching events before the returned ones. */
  hasMore: boolean;
}

/** A read after a cursor, as readShared and readOnce see it. */
type ReadAfter = ReadEvents & { after: bigint };

export class EventStream {
  /** Reads under way, by account and page: readers woken together share one (see readShared). */
  private readonly inFlight = new Map<string, { generation: number; page: Promise<EventPage> }>();
  /** Per account, the newest sequence of the last read, valid while `generation` stays (see readOnce). */
  private readonly heads = new Map<string, { generation: number; newest: bigint; at: number }>();
  /** Bumped by every commit announcement. */
  private generation = 0;

  constructor(
    private readonly store: EventStore,
    private readonly commits: CommitSignal,
    private readonly clock: Clock,
  ) {
    commits.on(ANY_ACCOUNT, () => {
      this.generation++;
      this.heads.clear();
    });
  }

  async read(accountId: string, request: ReadEvents): Promise<EventPage> {
    if (request.tail !== undefined) return this.readTail(accountId, request.tail, request);
    const afterCursor: ReadAfter = { ...request, after: request.after ?? 0n };
    const deadline = Date.now() + (request.waitMs ?? 0);
    for (;;) {
      // Listen before reading: an event committed between the read and the wait still wakes us.
      const woken = this.commits.watch(accountId);
      try {
        const page = await this.readShared(accountId, afterCursor);
        const left = deadline - Date.now();
        if (page.events.length > 0 || left <= 0 || request.signal?.aborted) return page;
        await woken.wait(Math.min(left, SAFETY_REREAD_MS), request.signal);
      } finally {
        woken.cancel();
      }
    }
  }

  /**
   * One commit wakes every reader of the account at once; those asking for the same page share one
   * database read. A reader joins a read only when no commit was announced since it began, so it
   * sees all this reader would (and a commit announced later wakes the reader again anyway).
   */
  private readShared(accountId: string, request: ReadAfter): Promise<EventPage> {
    const key = [accountId, request.after, request.limit, request.resourceType ?? '', request.resourceId ?? ''].join('\u0000');
    const current = this.inFlight.get(key);
    if (current && current.generation === this.generation) return current.page;
    const entry = { generation: this.generation, page: this.readOnce(accountId, request) };
    this.inFlight.set(key, entry);
    const done = () => {
      if (this.inFlight.get(key) === entry) this.inFlight.delete(key);
    };
    entry.page.then(done, done);
    return entry.page;
  }

  private async readOnce(accountId: string, request: ReadAfter): Promise<EventPage> {
    // A follower at the head asks again right after its answer: when no commit was announced since
    // the last read saw that head, there is nothing new (and its cursor cannot be past retention).
    const head = this.heads.get(accountId);
    if (head && head.generation === this.generation && Date.now() - head.at < HEAD_CACHE_MS && request.after >= head.newest) {
      return { events: [], nextCursor: request.after, hasMore: false };
    }
    const position = await this.position(accountId);
    if (request.after > 0n && request.after < position.prunedThrough) {
      throw new KisteError('N30', {
        message: `Events up to ${position.prunedThrough} are no longer kept (${EVENT_RETENTION_DAYS} days); the cursor ${request.after} is older`,
        param: 'after',
      });
    }
    // A cursor past the newest event (a client's bad value) reads nothing and stays where it is.
    const upTo = position.newest;
    if (request.after >= upTo) return { events: [], nextCursor: request.after, hasMore: false }; // nothing newer to list
    const events = await this.store.list(accountId, { ...request, limit: request.limit + 1, upTo });
    const hasMore = events.length > request.limit;
    const page = hasMore ? events.slice(0, request.limit) : events;
    const nextCursor = hasMore ? page[page.length - 1]!.sequence : upTo > request.after ? upTo : request.after;
    return { events: page, nextCursor, hasMore };
  }

  /**
   * The newest `tail` matching events, oldest first, read directly (a client does this once, before
   * it follows, so there is nothing to share). The cursor is the account's newest sequence, not the
   * newest returned event: the filters left out what came after that, and a follower goes on from
   * there. Events up to the newest sequence have all committed, so none can appear behind it later.
   */
  private async readTail(accountId: string, tail: number, request: ReadEvents): Promise<EventPage> {
    if (request.after !== undefined || request.waitMs !== undefined) {
      throw new KisteError('P01', { message: 'tail reads the newest events and cannot be combined with after or wait_ms', param: 'tail' });
    }
    const position = await this.position(accountId);
    const newest = await this.store.listNewest(accountId, {
      upTo: position.newest,
      limit: tail + 1,
      resourceType: request.resourceType,
      resourceId: request.resourceId,
    });
    return { events: newest.slice(0, tail).reverse(), nextCursor: position.newest, hasMore: newest.length > tail };
  }

  /** The account's newest sequence and retention point, remembered as its head (see readOnce); A01 when the account is gone. */
  private async position(accountId: string): Promise<{ newest: bigint; prunedThrough: bigint }> {
    const generation = this.generation;
    const at = Date.now();
    const position = await this.store.position(accountId);
    if (!position) throw new KisteError('A01');
    if (generation === this.generation) this.heads.set(accountId, { generation, newest: position.newest, at });
    return position;
  }

  /** Background: removes events past retention. */
  removeExpired(): Promise<number> {
    return this.store.removeOlderThan(new Date(this.clock.now().getTime() - EVENT_RETENTION_DAYS * 86_400_000));
  }
}
