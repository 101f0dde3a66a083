// Keeps a page current: when another tab, the CLI or the service changes what the page shows, the
// account event stream says so and the page reads it again. Events come in bursts (acknowledging ten
// alerts is ten events), so one refresh follows a burst.
import { useEffect, useRef } from 'preact/hooks';
import { useAccountEvents, type AccountEvent } from '../events';

const SETTLE_MS = 300;

export function useRefreshOn(
  resourceType: AccountEvent['resource_type'] | AccountEvent['resource_type'][],
  refresh: () => void,
  matches: (event: AccountEvent) => boolean = () => true,
): void {
  const types = Array.isArray(resourceType) ? resourceType : [resourceType];
  const timer = useRef<ReturnType<typeof setTimeout> | undefined>(undefined);
  const latest = useRef(refresh);
  latest.current = refresh;
  useEffect(() => () => clearTimeout(timer.current), []);
  useAccountEvents((event) => {
    if (!types.includes(event.resource_type) || !matches(event)) return;
    clearTimeout(timer.current);
    timer.current = setTimeout(() => latest.current(), SETTLE_MS);
  });
}
