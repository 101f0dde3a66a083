// The browser terminal: xterm.js on the service's terminal capability. Loaded on demand (this
// module and xterm's code and style sheet are their own chunk, not part of the console's first load).
//
// Protocol (GET /v1/terminal/connect, WebSocket): binary frames carry the terminal's bytes both
// ways; the client sends text frames {"type":"resize","cols":N,"rows":N}; the service sends
// {"type":"exit","exit_code":N|null,"reason":"..."} and closes with 1000 when the shell ends (or
// another connection took the terminal over), and {"type":"error","message":"..."} for a bad
// resize. After a client leaves, the shell waits 60 s: connecting again with the same capability
// reattaches and first replays the recent output (up to 64 KiB), so the screen is cleared before.
import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import xtermStyle from '@xterm/xterm/css/xterm.css?raw';

export type TerminalState =
  | { kind: 'connecting' }
  | { kind: 'connected' }
  | { kind: 'reconnecting'; attempt: number }
  | { kind: 'ended'; reason: string; exitCode: number | null; takenOver: boolean }
  | { kind: 'failed'; error: unknown };

/** A capability that was used, and when its client left (for reattaching later). */
export interface Capability {
  url: string;
  leftAt: number;
}

export interface TerminalOptions {
  /** POST /v1/instances/{name}/terminal at this size: the capability's connect URL. */
  newSession(size: { cols: number; rows: number }): Promise<string>;
  /** Whether a failed newSession is worth trying again (the service was unreachable, busy…). */
  retryable(error: unknown): boolean;
  /** A capability from a moment ago (the page showed this terminal before): reattach to it first. */
  previous: Capability | null;
  onState(state: TerminalState): void;
}

export interface TerminalHandle {
  /** Connects again to the same shell (after another window took it over). */
  reconnect(): void;
  /** Starts a new shell. */
  restart(): void;
  copySelection(): Promise<void>;
  /** Pastes the clipboard (the browser asks for permission). */
  paste(): Promise<void>;
  focus(): void;
  /** Closes the connection (the shell waits for a reattach) and answers the capability to reattach with. */
  dispose(): Capability | null;
}

/** The service keeps a left shell for 60 s; a little less leaves room for the connection itself. */
const REATTACH_WITHIN_MS = 55_000;
const BACKOFF_MS = [500, 1_000, 2_000, 4_000, 8_000, 15_000];
/** Drops in a row after which the page stops trying and offers a new session (no endless loop). */
const MAX_FAILURES = 6;
/** A connection that stayed up this long counts as a success (resets the backoff). */
const STABLE_MS = 10_000;
/** Reattach attempts that fail before a new shell is started instead. */
const REATTACH_TRIES = 2;
const TAKEN_OVER = 'another client took over this terminal';

/** The connect URL on this page's own origin: the service's base URL may name another host, and the CSP allows only 'self'. */
function onThisOrigin(connectUrl: string): string {
  const url = new URL(connectUrl, window.location.href);
  return `${window.location.protocol === 'https:' ? 'wss:' : 'ws:'}//${window.location.host}${url.pathname}${url.search}`;
}

async function writeClipboard(text: string): Promise<void> {
  if (navigator.clipboard?.writeText) return navigator.clipboard.writeText(text);
  // Pages not in a secure context have no clipboard API: the older copy command still works.
  const area = document.createElement('textarea');
  area.value = text;
  document.body.append(area);
  area.select();
  document.execCommand('copy');
  area.remove();
}

/**
 * xterm's style sheet, added once. (A plain CSS import in this chunk is not loaded with it by the
 * console's Vite build, so the chunk brings the style as text; the console's CSP allows inline
 * styles, which xterm needs anyway.)
 */
function addStyle(): void {
  if (document.getElementById('xterm-style')) return;
  const style = document.createElement('style');
  style.id = 'xterm-style';
  style.textContent = xtermStyle;
  document.head.append(style);
}

/** Opens the terminal in `container` with its style applied (it measures its cells at once), and connects it. */
export function openTerminal(container: HTMLElement, options: TerminalOptions): TerminalHandle {
  addStyle();
  return mountTerminal(container, options);
}

function mountTerminal(container: HTMLElement, options: TerminalOptions): TerminalHandle {
  const term = new Terminal({
    cursorBlink: true,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace',
    fontSize: 14,
    scrollback: 5000,
    theme: { background: '#000000' },
    // Links come from guest output (hostile): only web addresses open, in a new tab without an opener.
    linkHandler: {
      activate: (_event, uri) => {
        if (/^https?:\/\//i.test(uri)) window.open(uri, '_blank', 'noopener,noreferrer');
      },
    },
  });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(container);
  fit.fit();

  let socket: WebSocket | null = null;
  let capability: Capability | null = options.previous;
  let reattachFailures = 0;
  let failures = 0;
  let retryTimer: ReturnType<typeof setTimeout> | null = null;
  let disposed = false;
  const encoder = new TextEncoder();

  const send = (data: string | Uint8Array) => {
    if (socket?.readyState === WebSocket.OPEN) socket.send(data);
  };
  const sendSize = () => send(JSON.stringify({ type: 'resize', cols: term.cols, rows: term.rows }));
  // Keys and pastes (xterm turns both into data) go as binary frames, as the protocol wants.
  term.onData((data) => send(encoder.encode(data)));
  term.onBinary((data) => send(Uint8Array.from(data, (char) => char.charCodeAt(0))));
  term.onResize(sendSize);
  const resizes = new ResizeObserver(() => fit.fit());
  resizes.observe(container);

  // Ctrl+Shift+C copies the selection; Ctrl+Shift+V is left to the browser, whose paste event xterm
  // turns into input (no clipboard permission needed). Both are kept from the shell.
  term.attachCustomKeyEventHandler((event) => {
    if (!event.ctrlKey || !event.shiftKey || event.altKey || event.metaKey) return true;
    if (event.code === 'KeyC') {
      if (event.type === 'keydown') {
        event.preventDefault();
        void copySelection();
      }
      return false;
    }
    return event.code !== 'KeyV';
  });

  const copySelection = async () => {
    if (term.hasSelection()) await writeClipboard(term.getSelection());
    term.focus();
  };

  const connect = (target: Capability, reattach: boolean) => {
    const ws = new WebSocket(onThisOrigin(target.url));
    ws.binaryType = 'arraybuffer';
    socket = ws;
    let opened = false;
    let ended = false;
    let stable: ReturnType<typeof setTimeout> | null = null;
    ws.onopen = () => {
      opened = true;
      stable = setTimeout(() => (failures = 0), STABLE_MS);
      reattachFailures = 0;
      // The service replays the recent output to a reattached client: start from a clean screen.
      if (reattach) term.reset();
      sendSize();
      options.onState({ kind: 'connected' });
      term.focus();
    };
    ws.onmessage = (message: MessageEvent<ArrayBuffer | string>) => {
      if (typeof message.data !== 'string') return term.write(new Uint8Array(message.data));
      const control = JSON.parse(message.data) as { type?: string; exit_code?: number | null; reason?: string; message?: string };
      if (control.type === 'exit') {
        ended = true;
        const takenOver = control.reason === TAKEN_OVER;
        if (!takenOver) capability = null; // the shell is gone: its capability opens nothing any more
        options.onState({ kind: 'ended', reason: control.reason ?? 'the terminal ended', exitCode: control.exit_code ?? null, takenOver });
      } else if (control.type === 'error' && control.message) {
        term.write(`\r\n\x1b[31m[${control.message}]\x1b[0m\r\n`);
      }
    };
    ws.onclose = () => {
      if (stable) clearTimeout(stable);
      if (socket !== ws || disposed || ended) return;
      socket = null;
      if (opened) target.leftAt = Date.now();
      else if (reattach) reattachFailures += 1;
      scheduleReconnect();
    };
  };

  const scheduleReconnect = () => {
    if (failures >= MAX_FAILURES) {
      options.onState({ kind: 'failed', error: new Error('The terminal connection kept dropping.') });
      return;
    }
    const delay = BACKOFF_MS[Math.min(failures, BACKOFF_MS.length - 1)]!;
    failures += 1;
    options.onState({ kind: 'reconnecting', attempt: failures });
    retryTimer = setTimeout(() => {
      retryTimer = null;
      // The same shell while it still waits for us; else a new one.
      if (capability && reattachFailures < REATTACH_TRIES && Date.now() - capability.leftAt < REATTACH_WITHIN_MS) connect(capability, true);
      else void start(true);
    }, delay);
  };

  const start = async (afterDrop: boolean) => {
    capability = null;
    reattachFailures = 0;
    if (!afterDrop) options.onState({ kind: 'connecting' });
    try {
      const url = await options.newSession({ cols: term.cols, rows: term.rows });
      if (disposed) return;
      capability = { url, leftAt: Date.now() };
      if (afterDrop) term.write('\r\n\x1b[2m[a new shell: the previous one was gone]\x1b[0m\r\n');
      connect(capability, false);
    } catch (error) {
      if (disposed) return;
      if (options.retryable(error)) scheduleReconnect();
      else options.onState({ kind: 'failed', error });
    }
  };

  const stopRetrying = () => {
    if (retryTimer) clearTimeout(retryTimer);
    retryTimer = null;
  };

  if (capability && Date.now() - capability.leftAt < REATTACH_WITHIN_MS) {
    options.onState({ kind: 'connecting' });
    connect(capability, true);
  } else void start(false);

  return {
    reconnect() {
      stopRetrying();
      if (!capability) return void start(false);
      options.onState({ kind: 'connecting' });
      connect(capability, true);
    },
    restart() {
      stopRetrying();
      failures = 0;
      socket?.close(1000);
      socket = null;
      term.reset();
      void start(false);
    },
    copySelection,
    async paste() {
      const text = await navigator.clipboard.readText();
      term.paste(text);
      term.focus();
    },
    focus: () => term.focus(),
    dispose() {
      disposed = true;
      stopRetrying();
      const open = socket?.readyState === WebSocket.OPEN;
      socket?.close(1000);
      resizes.disconnect();
      term.dispose();
      return capability && open ? { url: capability.url, leftAt: Date.now() } : capability;
    },
  };
}
