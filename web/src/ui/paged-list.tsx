// Lists as the API gives them: the list shape ({ data, has_more }, next page with `starting_after` the
// last id) or a plain array (one page). One hook keeps the rows, one view draws loading, error, empty,
// the rows and "Load more", so every list page behaves the same.
import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import type { ApiError } from '../api';
import { asApiError, Button, Empty, ErrorNotice, Loading } from './kit';

export interface Page<T> {
  data: T[];
  has_more: boolean;
}

export interface PagedList<T> {
  items: T[] | undefined;
  hasMore: boolean;
  loading: boolean;
  loadingMore: boolean;
  error: ApiError | null;
  /** Reads the first page again (after a change, or a live event naming these rows). */
  reload(): void;
  loadMore(): void;
  /** Replaces or drops rows the page changed itself, without a read. */
  update(change: (items: T[]) => T[]): void;
}

/** `fetchPage(undefined)` reads the first page, `fetchPage(id)` the page after the row `id`. */
export function usePagedList<T extends { id: string }>(fetchPage: (startingAfter: string | undefined) => Promise<Page<T>>, deps: unknown[]): PagedList<T> {
  const [state, setState] = useState<{ items: T[] | undefined; hasMore: boolean; loading: boolean; loadingMore: boolean; error: ApiError | null }>({
    items: undefined,
    hasMore: false,
    loading: true,
    loadingMore: false,
    error: null,
  });
  // A newer read wins over an older one still under way (reload while loading more, filters changed).
  const generation = useRef(0);
  // eslint-disable-next-line react-hooks/exhaustive-deps
  const fetch = useCallback(fetchPage, deps);

  const reload = useCallback(() => {
    const mine = ++generation.current;
    setState((previous) => ({ ...previous, loading: true }));
    fetch(undefined).then(
      (page) => mine === generation.current && setState({ items: page.data, hasMore: page.has_more, loading: false, loadingMore: false, error: null }),
      (error: unknown) => mine === generation.current && setState((previous) => ({ ...previous, loading: false, loadingMore: false, error: asApiError(error) })),
    );
  }, [fetch]);

  useEffect(reload, [reload]);

  const loadMore = () => {
    const last = state.items?.at(-1);
    if (!last || state.loadingMore) return;
    const mine = ++generation.current;
    setState((previous) => ({ ...previous, loadingMore: true, error: null }));
    fetch(last.id).then(
      (page) =>
        mine === generation.current &&
        setState((previous) => ({ ...previous, items: [...(previous.items ?? []), ...page.data], hasMore: page.has_more, loadingMore: false })),
      (error: unknown) => mine === generation.current && setState((previous) => ({ ...previous, loadingMore: false, error: asApiError(error) })),
    );
  };

  const update = (change: (items: T[]) => T[]) => setState((previous) => ({ ...previous, items: previous.items && change(previous.items) }));

  return { ...state, reload, loadMore, update };
}

/** An array answer as a one-page list. */
export async function onePage<T>(pending: Promise<T[]>): Promise<Page<T>> {
  return { data: await pending, has_more: false };
}

/**
 * Loading, the error (message, hint, request id), the empty state or the rows, then "Load more". Any
 * list that grows by a button fits `list` (the events feed too), with its own wording in the labels.
 */
export function ListView<T>({ list, empty, loadingLabel, loadMoreLabel, children }: {
  list: Pick<PagedList<T>, 'items' | 'hasMore' | 'loadingMore' | 'error' | 'loadMore'>;
  empty: ComponentChildren;
  loadingLabel?: string;
  loadMoreLabel?: string;
  children: (items: T[]) => ComponentChildren;
}) {
  if (list.items === undefined) return list.error ? <ErrorNotice error={list.error} /> : <Loading label={loadingLabel} />;
  return (
    <>
      <ErrorNotice error={list.error} />
      {list.items.length === 0 ? <Empty>{empty}</Empty> : children(list.items)}
      {list.hasMore && <LoadMore busy={list.loadingMore} onClick={list.loadMore} label={loadMoreLabel} />}
    </>
  );
}

export function LoadMore({ busy, onClick, label = 'Load more' }: { busy: boolean; onClick(): void; label?: string }) {
  return (
    <div class="load-more">
      <Button busy={busy} onClick={onClick}>
        {label}
      </Button>
    </div>
  );
}

/** Every row of a list the API pages (`fetchPage(id)` reads the page after row `id`), for the small per-account lists a form chooses from. */
export async function allPages<T extends { id: string }>(fetchPage: (startingAfter: string | undefined) => Promise<Page<T>>, maxPages = 20): Promise<T[]> {
  const rows: T[] = [];
  for (let page = 0; page < maxPages; page += 1) {
    const answer = await fetchPage(rows.at(-1)?.id);
    rows.push(...answer.data);
    if (!answer.has_more || answer.data.length === 0) break;
  }
  return rows;
}
