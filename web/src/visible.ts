// Whether the browser tab is shown, and an abortable pause: periodic reads (metrics, a followed log)
// pause while the tab is hidden, so a forgotten tab spends none of the account's request budget; waits end early when aborted.
import { useEffect, useState } from 'preact/hooks';

export function usePageVisible(): boolean {
  const [visible, setVisible] = useState(() => document.visibilityState === 'visible');
  useEffect(() => {
    const update = () => setVisible(document.visibilityState === 'visible');
    document.addEventListener('visibilitychange', update);
    return () => document.removeEventListener('visibilitychange', update);
  }, []);
  return visible;
}

/** Waits `ms`, or less when aborted (then resolves at once). */
export function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}
