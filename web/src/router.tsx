// A small history router: console addresses are real paths (/console/machines/<name>), so links can
// be opened in a new tab and the service answers every one with the app shell.
import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';

export interface Location {
  path: string;
  query: URLSearchParams;
}

function current(): Location {
  return { path: window.location.pathname, query: new URLSearchParams(window.location.search) };
}

const listeners = new Set<() => void>();
window.addEventListener('popstate', () => listeners.forEach((listener) => listener()));

export function navigate(to: string, options: { replace?: boolean } = {}): void {
  if (options.replace) window.history.replaceState(null, '', to);
  else window.history.pushState(null, '', to);
  listeners.forEach((listener) => listener());
  if (!options.replace) window.scrollTo(0, 0);
}

export function useLocation(): Location {
  const [location, setLocation] = useState(current);
  useEffect(() => {
    const update = () => setLocation(current());
    listeners.add(update);
    return () => void listeners.delete(update);
  }, []);
  return location;
}

/**
 * Only same-origin paths are followed after sign-in (no open redirect). The target is resolved the
 * way the browser would resolve it (which drops tabs and newlines, and reads a backslash as "/"), and only a
 * result on this origin is kept.
 */
export function safeContinue(target: string | null): string {
  if (!target || !target.startsWith('/') || /[\u0000-\u001f\\]/.test(target)) return '/';
  try {
    const url = new URL(target, window.location.origin);
    return url.origin === window.location.origin ? url.pathname + url.search + url.hash : '/';
  } catch {
    return '/';
  }
}

/** Where a path goes once continued to: console pages stay in the app, other paths (OAuth) load for real. */
export function go(target: string): void {
  if (target === '/' || target.startsWith('/console/')) navigate(target, { replace: true });
  else window.location.assign(target);
}

interface LinkProps {
  href: string;
  children: ComponentChildren;
  class?: string;
  'aria-label'?: string;
  'aria-current'?: 'page';
}

export function Link({ href, children, ...rest }: LinkProps) {
  return (
    <a
      {...rest}
      href={href}
      onClick={(event) => {
        if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
        event.preventDefault();
        navigate(href);
      }}
    >
      {children}
    </a>
  );
}
