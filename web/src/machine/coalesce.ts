// Bursts of events (a machine's created + running, several checkpoints) should cause one request,
// not one each: the first trigger schedules the work, later ones within the delay join it.
import { useCallback, useEffect, useRef } from 'preact/hooks';

export function useCoalesced(work: () => void, delayMs = 250): () => void {
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);
  const latest = useRef(work);
  latest.current = work;
  useEffect(
    () => () => {
      if (timer.current) clearTimeout(timer.current);
    },
    [],
  );
  return useCallback(() => {
    if (timer.current) return;
    timer.current = setTimeout(() => {
      timer.current = null;
      latest.current();
    }, delayMs);
  }, [delayMs]);
}
