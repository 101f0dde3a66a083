// The machine's console log (its serial output), the last lines of it. "Follow" reads it again every
// few seconds while on and the browser tab is visible, keeping the view at the end.
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { api, ok, type Instance } from '../../api';
import { Button, Field, Loaded, useLoad } from '../../ui/kit';
import { pause, usePageVisible } from '../../visible';

const FOLLOW_EVERY_MS = 3_000;
/** Terminal control sequences in the serial output (colours, cursor moves): shown as plain text, without them. */
const CONTROL_SEQUENCES = /\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])|[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]|\r(?=\n)/g;
const TAILS = [100, 500, 2000];

export function LogsTab({ instance }: { instance: Instance }) {
  const [tail, setTail] = useState(500);
  const [follow, setFollow] = useState(false);
  const visible = usePageVisible();
  const read = (signal?: AbortSignal) =>
    ok(api.GET('/v1/instances/{name}/logs', { params: { path: { name: instance.name }, query: { tail } }, signal })).then((answer) => answer.logs.replace(CONTROL_SEQUENCES, ''));
  const logs = useLoad(() => read(), [instance.name, tail]);
  const view = useRef<HTMLPreElement>(null);

  useEffect(() => {
    if (!follow || !visible) return;
    const controller = new AbortController();
    void (async () => {
      while (!controller.signal.aborted) {
        await pause(FOLLOW_EVERY_MS, controller.signal);
        if (controller.signal.aborted) return;
        // A failed read is shown by the next successful one; following goes on.
        // Aborted with the effect, so a read of an earlier tail never lands after a change.
        await read(controller.signal).then((text) => !controller.signal.aborted && logs.set(text), () => undefined);
      }
    })();
    return () => controller.abort();
  }, [follow, visible, instance.name, tail]);

  useLayoutEffect(() => {
    if (follow && view.current) view.current.scrollTop = view.current.scrollHeight;
  }, [logs.data, follow]);

  return (
    <section aria-labelledby="logs-heading">
      <h2 id="logs-heading" class="visually-hidden">
        Console log
      </h2>
      <div class="toolbar">
        <Field label="Lines" id="log-tail">
          <select id="log-tail" value={String(tail)} onChange={(e) => setTail(Number(e.currentTarget.value))}>
            {TAILS.map((lines) => (
              <option key={lines} value={String(lines)}>
                Last {lines}
              </option>
            ))}
          </select>
        </Field>
        <label class="choice" for="log-follow">
          <input id="log-follow" type="checkbox" checked={follow} onChange={(e) => setFollow(e.currentTarget.checked)} />
          Follow
        </label>
        <Button onClick={logs.reload} busy={logs.loading && !follow}>
          Refresh
        </Button>
      </div>
      <Loaded load={logs}>
        {(text) => (
          <pre class="log" ref={view} tabIndex={0} aria-label="Console log" aria-live={follow ? 'off' : undefined}>
            {text || '(nothing logged yet)'}
          </pre>
        )}
      </Loaded>
    </section>
  );
}
