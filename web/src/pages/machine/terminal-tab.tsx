// The terminal tab: a shell in the running machine, in xterm.js loaded only when this tab opens.
// Leaving the tab keeps the shell for the service's reattach window: coming back within it
// reattaches to the same shell (the capability is remembered for this page's lifetime only).
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, ok, type Instance } from '../../api';
import { asApiError, Button, Empty, ErrorNotice } from '../../ui/kit';
import type { Capability, TerminalHandle, TerminalState } from './terminal-client';

const recentCapabilities = new Map<string, Capability>();

export function TerminalTab({ instance }: { instance: Instance }) {
  if (instance.status !== 'running') return <Empty>The terminal opens a shell in the running machine; it is {instance.status} now.</Empty>;
  return <TerminalPanel key={instance.id} instance={instance} />;
}

function describe(state: TerminalState | { kind: 'loading' }): string {
  switch (state.kind) {
    case 'loading':
      return 'Loading the terminal…';
    case 'connecting':
      return 'Connecting…';
    case 'connected':
      return 'Connected';
    case 'reconnecting':
      return 'Reconnecting…';
    case 'ended':
      if (state.takenOver) return 'The terminal was opened in another window.';
      return `The session ended: ${state.reason}${state.exitCode !== null ? ` (exit code ${state.exitCode})` : ''}.`;
    case 'failed':
      return 'The terminal could not be opened.';
  }
}

function TerminalPanel({ instance }: { instance: Instance }) {
  const container = useRef<HTMLDivElement>(null);
  const handle = useRef<TerminalHandle | null>(null);
  const [state, setState] = useState<TerminalState | { kind: 'loading' }>({ kind: 'loading' });
  const [clipboardProblem, setClipboardProblem] = useState<string | null>(null);

  useEffect(() => {
    let unmounted = false;
    import('./terminal-client')
      .then(({ openTerminal }) => {
        if (unmounted || !container.current) return;
        return openTerminal(container.current, {
          previous: recentCapabilities.get(instance.id) ?? null,
          newSession: async (size) => (await ok(api.POST('/v1/instances/{name}/terminal', { params: { path: { name: instance.name } }, body: size }))).connect_url,
          retryable: (error) => {
            const status = asApiError(error).status;
            return status === 0 || status === 429 || status >= 500;
          },
          onState: (next) => !unmounted && setState(next),
        });
      })
      .then(
        (opened) => {
          if (!opened) return;
          if (unmounted) opened.dispose();
          else handle.current = opened;
        },
        (error: unknown) => setState({ kind: 'failed', error }),
      );
    return () => {
      unmounted = true;
      const capability = handle.current?.dispose();
      if (capability) recentCapabilities.set(instance.id, capability);
      else recentCapabilities.delete(instance.id);
      handle.current = null;
    };
  }, [instance.id]);

  const clipboard = (work: () => Promise<void>, what: string) => () =>
    void work().then(
      () => setClipboardProblem(null),
      () => setClipboardProblem(`The browser did not allow ${what}. Use Ctrl+Shift+C / Ctrl+Shift+V or the browser's menu.`),
    );

  return (
    <section class="terminal-tab">
      <div class="toolbar">
        <h2 id="terminal-heading" class="visually-hidden">
          Terminal
        </h2>
        <p class={`terminal-state state-${state.kind}`} role="status" aria-live="polite">
          {describe(state)}
        </p>
        <div class="actions">
          <Button onClick={clipboard(() => handle.current?.copySelection() ?? Promise.resolve(), 'copying')}>Copy selection</Button>
          <Button onClick={clipboard(() => handle.current?.paste() ?? Promise.resolve(), 'reading the clipboard')}>Paste</Button>
          {state.kind === 'ended' && state.takenOver && <Button onClick={() => handle.current?.reconnect()}>Use it here</Button>}
          {(state.kind === 'ended' || state.kind === 'failed') && (
            <Button variant="primary" onClick={() => handle.current?.restart()}>
              New session
            </Button>
          )}
        </div>
      </div>
      {state.kind === 'failed' && <ErrorNotice error={asApiError(state.error)} />}
      {clipboardProblem && (
        <p class="hint" role="alert">
          {clipboardProblem}
        </p>
      )}
      <div class="terminal machine-terminal" role="region" aria-label="Terminal" ref={container} />
      <p class="hint">Select text to copy it with Ctrl+Shift+C; paste with Ctrl+Shift+V. The shell survives a dropped connection for a minute.</p>
    </section>
  );
}
