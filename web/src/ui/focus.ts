// Focus for content that appears after an action (a secret shown once): keyboard and screen reader
// users land on it instead of staying on the button that made it.
import { useEffect, useRef } from 'preact/hooks';

/** A ref for a container; whenever `shown` changes to something (a new secret), its first control gets the focus. */
export function useFocusWhenShown<T extends HTMLElement>(shown: unknown) {
  const container = useRef<T>(null);
  useEffect(() => {
    if (shown) container.current?.querySelector<HTMLElement>('button, [href], input')?.focus();
  }, [shown]);
  return container;
}
