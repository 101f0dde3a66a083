// The list shape with cursor pagination (limit, starting_after, ending_before) over a collection
// already in its answer order. Used for small per-account collections (sign-ins, device keys).
import { KisteError } from '../src/errors';

export interface PageQuery {
  limit?: number;
  starting_after?: string;
  ending_before?: string;
}

export interface ListShape<T> {
  object: 'list';
  data: T[];
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
}

export function paginate<T extends { id: string }>(items: T[], query: PageQuery): ListShape<T> {
  const limit = query.limit ?? 20;
  let start = 0;
  let end = items.length;
  if (query.starting_after !== undefined) {
    start = indexOfCursor(items, query.starting_after, 'starting_after') + 1;
  } else if (query.ending_before !== undefined) {
    end = indexOfCursor(items, query.ending_before, 'ending_before');
    start = Math.max(0, end - limit);
  }
  const data = items.slice(start, Math.min(end, start + limit));
  const hasMore = query.ending_before !== undefined ? start > 0 : start + data.length < end;
  return {
    object: 'list',
    data,
    first_id: data[0]?.id ?? null,
    last_id: data[data.length - 1]?.id ?? null,
    has_more: hasMore,
  };
}

function indexOfCursor(items: { id: string }[], cursor: string, param: string): number {
  const index = items.findIndex((item) => item.id === cursor);
  if (index < 0) throw new KisteError('P01', { message: `${param} names no object of this list`, param });
  return index;
}
