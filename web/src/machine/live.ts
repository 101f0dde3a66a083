// Machines kept current from the account's event stream (one shared long poll, see events.ts):
// an event about a machine refetches that machine; one that adds, removes or renames a machine
// refetches the list. Nothing here polls.
import { useRef, useState } from 'preact/hooks';
import { api, ok, type Instance } from '../api';
import { useAccountEvents, type AccountEvent } from '../events';
import { useLoad } from '../ui/kit';
import { useCoalesced } from './coalesce';

/** Events after which the list itself changes (not just one machine in it). */
const LIST_EVENTS = new Set<AccountEvent['type']>(['instance.created', 'instance.deleted', 'instance.renamed']);

export function fetchInstance(name: string): Promise<Instance> {
  return ok(api.GET('/v1/instances/{name}', { params: { path: { name } } }));
}

/** The name an instance event carries (its name when the event happened). */
export function eventInstanceName(event: AccountEvent): string | null {
  const name = (event.data as { name?: unknown }).name;
  return typeof name === 'string' ? name : null;
}

/** The account's machines, newest first (an account has at most a few dozen: one page of 100). */
export function useInstanceList() {
  const list = useLoad(async () => (await ok(api.GET('/v1/instances', { params: { query: { limit: 100 } } }))).data, []);
  const latest = useRef(list);
  latest.current = list;
  const reloadList = useCoalesced(list.reload);

  const refreshOne = async (name: string) => {
    try {
      const fresh = await fetchInstance(name);
      const current = latest.current.data ?? [];
      if (!current.some((instance) => instance.id === fresh.id)) return reloadList();
      latest.current.set(current.map((instance) => (instance.id === fresh.id ? fresh : instance)));
    } catch {
      reloadList(); // gone or renamed meanwhile: the list knows
    }
  };

  useAccountEvents((event) => {
    if (event.resource_type !== 'instance') return;
    const name = eventInstanceName(event);
    if (LIST_EVENTS.has(event.type) || !name) reloadList();
    else void refreshOne(name);
  });
  return list;
}

/**
 * One machine, refetched when an event names it. `deleted` turns true at its instance.deleted;
 * `renamedTo` is its new name after an instance.renamed (the page moves there).
 */
export function useInstance(name: string) {
  const load = useLoad(() => fetchInstance(name), [name]);
  const [deleted, setDeleted] = useState(false);
  const [renamedTo, setRenamedTo] = useState<string | null>(null);
  const refetch = useCoalesced(load.reload);
  useAccountEvents((event) => {
    if (event.resource_type !== 'instance' || !load.data || event.resource_id !== load.data.id) return;
    if (event.type === 'instance.deleted') setDeleted(true);
    else if (event.type === 'instance.renamed') setRenamedTo(eventInstanceName(event));
    else refetch();
  });
  return { ...load, deleted, renamedTo };
}
