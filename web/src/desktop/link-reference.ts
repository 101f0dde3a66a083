// The desktop link's machine reference: the fragment of `{desktop_url}/desktop#<reference>`. It is
// never sent to a server by the browser; while the viewer sends a signed-out browser to sign in, it
// waits in this tab's sessionStorage (not in the sign-in page's address, which servers log).
const PATTERN = /^kiste_dsk_[A-Za-z0-9_-]{20,200}$/;
const PENDING_KEY = 'kiste.desktop.reference';

/** The reference of the current address (or the one put aside before sign-in), or null. */
export function currentReference(): string | null {
  const fromHash = window.location.hash.slice(1);
  if (PATTERN.test(fromHash)) return fromHash;
  const pending = window.sessionStorage.getItem(PENDING_KEY);
  window.sessionStorage.removeItem(PENDING_KEY);
  if (pending && PATTERN.test(pending)) {
    window.history.replaceState(null, '', `/desktop#${pending}`);
    return pending;
  }
  return null;
}

/** Keeps the reference in this tab while the browser signs in. */
export function setAsideReference(): void {
  const reference = window.location.hash.slice(1);
  if (PATTERN.test(reference)) window.sessionStorage.setItem(PENDING_KEY, reference);
}

/** This tab opened a session from this reference (a reload renews it rather than opening another). */
export function markSessionOpened(reference: string, opened: boolean): void {
  const key = `kiste.desktop.opened.${reference.slice(-12)}`;
  if (opened) window.sessionStorage.setItem(key, '1');
  else window.sessionStorage.removeItem(key);
}

export function sessionOpened(reference: string): boolean {
  return window.sessionStorage.getItem(`kiste.desktop.opened.${reference.slice(-12)}`) === '1';
}
