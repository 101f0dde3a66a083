// The environment setup of a machine (GET /v1/instances/{name}/setup): each step (files, one clone per
// repository, the setup script) with its status and duration, the error, and the clones' and
// script's output. Read again when the machine's setup status changes (its events refetch the
// machine) and every few seconds while the setup runs, since output has no events of its own.
import { useEffect } from 'preact/hooks';
import type { Instance, Schemas } from '../../api';
import { Button, Loaded, StatusBadge, Time, useLoad } from '../../ui/kit';
import { Table } from '../../ui/table';
import { pause, usePageVisible } from '../../visible';
import { Link } from '../../router';
import { environmentPath } from '../environments/data';
import { fetchSetup } from './overview';

type Step = Schemas['InstanceSetupStep'];
const FOLLOW_EVERY_MS = 3_000;

const STEP_LABELS: Record<Step['name'], string> = {
  files: 'Secret files and variables',
  clone: 'Clone',
  setup_script: 'Setup script',
};

export function SetupTab({ instance }: { instance: Instance }) {
  const setup = useLoad(() => fetchSetup(instance.name), [instance.name, instance.setup_status]);
  const visible = usePageVisible();
  const running = setup.data?.status === 'pending' || setup.data?.status === 'running';
  useEffect(() => {
    if (!running || !visible) return;
    const controller = new AbortController();
    void (async () => {
      while (!controller.signal.aborted) {
        await pause(FOLLOW_EVERY_MS, controller.signal);
        if (!controller.signal.aborted) setup.reload();
      }
    })();
    return () => controller.abort();
  }, [running, visible, instance.name]);

  return (
    <section aria-labelledby="setup-heading" class="setup-tab">
      <div class="toolbar">
        <h2 id="setup-heading">Environment setup</h2>
        <Button onClick={setup.reload} busy={setup.loading && setup.data !== undefined}>
          Refresh
        </Button>
      </div>
      <Loaded load={setup}>
        {(data) =>
          data.status === 'none' ? (
            <p class="empty">This machine was created without an environment.</p>
          ) : (
            <>
              <dl class="fields card">
                <dt>Status</dt>
                <dd>
                  <StatusBadge status={data.status} />
                </dd>
                <dt>Environment</dt>
                <dd>
                  {data.environment_name ? (
                    <>
                      <Link href={environmentPath(data.environment_name)}>{data.environment_name}</Link>, version {data.environment_version}
                    </>
                  ) : (
                    <code>{data.environment_version_id}</code>
                  )}
                </dd>
                {data.error && (
                  <>
                    <dt>Error</dt>
                    <dd>
                      <pre class="excerpt error-text">{data.error}</pre>
                    </dd>
                  </>
                )}
              </dl>
              <h3>Steps</h3>
              {data.steps.length === 0 ? (
                <p class="hint">No step has started yet.</p>
              ) : (
                <Table label="Setup steps" columns={['Step', 'Status', 'Started', 'Duration']}>
                  {data.steps.map((step, index) => (
                    <tr key={index}>
                      <th scope="row">
                        {STEP_LABELS[step.name] ?? step.name}
                        {step.detail && (
                          <span class="hint">
                            {' '}
                            <code>{step.detail}</code>
                          </span>
                        )}
                      </th>
                      <td>
                        <StatusBadge status={step.status} />
                      </td>
                      <td>
                        <Time iso={step.started_at} empty="not yet" />
                      </td>
                      <td class="number">{step.duration_ms === null ? '—' : formatDuration(step.duration_ms)}</td>
                    </tr>
                  ))}
                </Table>
              )}
              <h3>Output</h3>
              {data.output_truncated && <p class="hint">Earlier output was dropped: only the last 64 KiB are kept.</p>}
              <pre class="log" tabIndex={0} aria-label="Setup output">
                {data.output || '(no output yet)'}
              </pre>
            </>
          )
        }
      </Loaded>
    </section>
  );
}

function formatDuration(ms: number): string {
  if (ms < 1000) return `${ms} ms`;
  const seconds = ms / 1000;
  return seconds < 60 ? `${seconds.toFixed(1)} s` : `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
}
