// The desktop viewer at `{desktop_url}/desktop#<reference>`: the machine's desktop filling the window,
// with its connection state, reconnect, scale to fit, fullscreen and the recovery console. It waits
// while the desktop starts or the machine is stopped, and reconnects by itself after a drop (a stop
// with memory and a resume, a restart), renewing the tab's own session.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { ApiError } from '../api';
import { ErrorNotice } from '../ui/kit';
import { pause } from '../visible';
import { checkReady, openDesktop, renewDesktop, type DesktopSession } from './desktop-session';
import { currentReference } from './link-reference';
import { openRecoveryView } from './recovery-view';
import { openWebRtcView, type ScreenView } from './webrtc-view';

type ViewerState =
  | { kind: 'opening' }
  | { kind: 'waiting'; message: string; error: ApiError | null }
  | { kind: 'failed'; message: string; error: ApiError | null }
  | { kind: 'connecting' }
  | { kind: 'connected'; mode: Mode }
  | { kind: 'reconnecting' };

const RECONNECT_MAX_MS = 15_000;

/** WebRTC (the video stream) or the recovery console (plain RFB in noVNC). */
type Mode = 'webrtc' | 'recovery';

export function DesktopViewerPage() {
  const reference = useMemo(currentReference, []);
  const screen = useRef<HTMLDivElement>(null);
  const view = useRef<ScreenView | null>(null);
  const session = useRef<DesktopSession | null>(null);
  const backoff = useRef(1000);
  const [state, setState] = useState<ViewerState>({ kind: 'opening' });
  const [attempt, setAttempt] = useState(0);
  const [fit, setFit] = useState(true);
  const [mode, setMode] = useState<Mode>('webrtc');
  const [fellBack, setFellBack] = useState(false);
  const fitNow = useRef(fit);
  fitNow.current = fit;

  useEffect(() => {
    document.title = 'Desktop · kiste';
  }, []);

  useEffect(() => {
    if (!reference) return;
    const stop = new AbortController();
    const reconnectLater = () => {
      if (stop.signal.aborted) return;
      setState({ kind: 'reconnecting' });
      const wait = backoff.current;
      backoff.current = Math.min(RECONNECT_MAX_MS, backoff.current * 2);
      void pause(wait, stop.signal).then(() => !stop.signal.aborted && setAttempt((n) => n + 1));
    };
    void (async () => {
      let current: DesktopSession | null = null;
      while (!stop.signal.aborted && !current) {
        // Reconnecting: the tab's session renews (a fresh recovery authorization and fresh TURN credentials,
        // which live minutes) once the desktop can stream again.
        const notYet = session.current ? await checkReady(reference) : null;
        if (!notYet && session.current) {
          current = await renewDesktop(reference).catch(() => null);
          if (!current) session.current = null;
          continue;
        }
        const result = notYet ? { notYet: notYet.notYet, error: notYet.error } : await openDesktop(reference);
        if ('session' in result) {
          current = result.session;
          break;
        }
        if (result.notYet.retryAfterSeconds === null) {
          setState({ kind: 'failed', message: result.notYet.message, error: result.error });
          return;
        }
        setState({ kind: 'waiting', message: result.notYet.message, error: result.error });
        await pause(result.notYet.retryAfterSeconds * 1000, stop.signal);
      }
      if (stop.signal.aborted || !current || !screen.current) return;
      session.current = current;
      setState({ kind: 'connecting' });
      const events = {
        connected() {
          backoff.current = 1000;
          setState({ kind: 'connected', mode });
        },
        disconnected(neverConnected?: boolean) {
          if (stop.signal.aborted) return;
          // WebRTC that cannot connect (UDP blocked, no TURN): the recovery console always can.
          if (mode === 'webrtc' && neverConnected) {
            setFellBack(true);
            setMode('recovery');
            return;
          }
          reconnectLater();
        },
      };
      try {
        view.current = mode === 'webrtc'
          ? await openWebRtcView(screen.current, current, fitNow.current, events)
          : await openRecoveryView(screen.current, current.recovery.url, current.recovery.token, fitNow.current, events);
      } catch {
        return events.disconnected(mode === 'webrtc');
      }
      if (stop.signal.aborted) view.current.disconnect();
    })();
    return () => {
      stop.abort();
      view.current?.disconnect();
      view.current = null;
    };
  }, [reference, attempt, mode]);

  useEffect(() => view.current?.setScale(fit), [fit]);

  if (!reference) {
    return (
      <main class="narrow">
        <h1>Desktop</h1>
        <p>This address holds no desktop link. Open the machine's desktop from the console, or ask for a new link.</p>
        <p>
          <a href="/">Go to the console</a>
        </p>
      </main>
    );
  }

  const reconnect = () => {
    backoff.current = 1000;
    view.current?.disconnect();
    if (fellBack) {
      setFellBack(false);
      setMode('webrtc');
    }
    setAttempt((n) => n + 1);
  };
  return (
    <div class="desktop-viewer">
      <div class="desktop-toolbar" role="toolbar" aria-label="Desktop">
        <span class="desktop-state" role="status" aria-live="polite">
          {describe(state)}
        </span>
        <button
          type="button"
          class="button plain"
          aria-pressed={mode === 'recovery'}
          title="Plain view of the machine's screen; works whatever its desktop does"
          onClick={() => {
            setFellBack(false);
            setMode(mode === 'recovery' ? 'webrtc' : 'recovery');
          }}
        >
          Recovery console
        </button>
        <label class="desktop-fit">
          <input type="checkbox" checked={fit} onChange={(event) => setFit((event.target as HTMLInputElement).checked)} /> Scale to fit
        </label>
        <button type="button" class="button plain" onClick={reconnect}>
          Reconnect
        </button>
        <button type="button" class="button plain" onClick={() => void document.documentElement.requestFullscreen?.().catch(() => undefined)}>
          Fullscreen
        </button>
      </div>
      {fellBack && mode === 'recovery' && (
        <div class="desktop-notice">
          <p>The video stream could not connect from this network, so this is the recovery console. Reconnect to try the stream again.</p>
        </div>
      )}
      {(state.kind === 'waiting' || state.kind === 'failed') && (
        <div class="desktop-notice">
          <p>{state.message}</p>
          {state.kind === 'failed' && <ErrorNotice error={state.error} />}
        </div>
      )}
      <div class="desktop-screen" ref={screen} aria-label="Machine screen" />
    </div>
  );
}

function describe(state: ViewerState): string {
  switch (state.kind) {
    case 'opening':
      return 'Opening the desktop…';
    case 'waiting':
      return 'Waiting for the desktop…';
    case 'failed':
      return 'The desktop cannot be shown.';
    case 'connecting':
      return 'Connecting…';
    case 'connected':
      return state.mode === 'webrtc' ? 'Connected (WebRTC)' : 'Connected (recovery console)';
    case 'reconnecting':
      return 'Connection lost; reconnecting…';
  }
}
