// Live usage of a running machine: a sample every 3 s while this tab is shown and the browser tab is
// visible (the account may take 40 samples a minute in all, so one open page uses half). A 429
// waits its Retry-After; a 409 (the machine stopped) ends the sampling.
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, ApiError, ok, type Instance, type Schemas } from '../../api';
import { asApiError, Empty, ErrorNotice, Loading } from '../../ui/kit';
import { LineChart } from '../../ui/line-chart';
import { Table } from '../../ui/table';
import { formatMib, formatSeconds } from '../../machine/format';
import { pause, usePageVisible } from '../../visible';

type Metrics = Schemas['InstanceMetricsResponse'];

const SAMPLE_EVERY_MS = 3_000;
/** Samples kept for the charts: three minutes. */
const CAPACITY = 60;
const RATE_LIMITED_WAIT_MS = 10_000;

interface Sample {
  cpu: number | null;
  memory: number;
}

function useMetrics(instance: Instance) {
  const visible = usePageVisible();
  const [samples, setSamples] = useState<Sample[]>([]);
  const [latest, setLatest] = useState<Metrics | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const lastSampleAt = useRef(0);
  const running = instance.status === 'running';

  useEffect(() => {
    if (!running || !visible) return;
    const controller = new AbortController();
    const { signal } = controller;
    void (async () => {
      // Coming back to the tab never samples sooner than the interval allows.
      await pause(Math.max(0, lastSampleAt.current + SAMPLE_EVERY_MS - Date.now()), signal);
      while (!signal.aborted) {
        let wait = SAMPLE_EVERY_MS;
        lastSampleAt.current = Date.now();
        try {
          const metrics = await ok(api.GET('/v1/instances/{name}/metrics', { params: { path: { name: instance.name } }, signal }));
          setLatest(metrics);
          setSamples((previous) => [...previous.slice(1 - CAPACITY), { cpu: metrics.cpu.percent, memory: share(metrics.memory) }]);
          setError(null);
        } catch (failure) {
          if (signal.aborted) return;
          const problem = asApiError(failure);
          setError(problem);
          if (problem.status === 409) return; // not running (any more): the machine's events bring it back
          wait = problem.retryAfterSeconds ? problem.retryAfterSeconds * 1000 : RATE_LIMITED_WAIT_MS;
        }
        await pause(wait, signal);
      }
    })();
    return () => controller.abort();
  }, [instance.name, running, visible]);

  return { samples, latest, error, running, visible };
}

function share(capacity: Schemas['CapacityMetrics']): number {
  return capacity.total_mib > 0 ? (capacity.used_mib / capacity.total_mib) * 100 : 0;
}

const percent = (value: number) => `${value.toFixed(value < 10 ? 1 : 0)} %`;

export function MetricsTab({ instance }: { instance: Instance }) {
  const { samples, latest, error, running, visible } = useMetrics(instance);
  if (!running) return <Empty>Metrics are sampled while the machine runs; it is {instance.status} now.</Empty>;
  return (
    <section aria-labelledby="metrics-heading">
      <h2 id="metrics-heading" class="visually-hidden">
        Metrics
      </h2>
      <p class="hint">{visible ? 'A sample every 3 seconds while this page is shown; the charts cover the last 3 minutes.' : 'Paused while this browser tab is hidden.'}</p>
      <ErrorNotice error={error} />
      {!latest ? (
        !error && <Loading label="Taking the first sample…" />
      ) : (
        <>
          <div class="grid charts">
            <LineChart label="CPU" values={samples.map((sample) => sample.cpu)} max={100} capacity={CAPACITY} format={percent} />
            <LineChart label="Memory" values={samples.map((sample) => sample.memory)} max={100} capacity={CAPACITY} format={percent} />
          </div>
          <dl class="fields card">
            <dt>CPU</dt>
            <dd>
              {latest.cpu.cores} core{latest.cpu.cores === 1 ? '' : 's'}, load {latest.cpu.load_1.toFixed(2)} / {latest.cpu.load_5.toFixed(2)} / {latest.cpu.load_15.toFixed(2)}
            </dd>
            <dt>Memory</dt>
            <dd>
              {formatMib(latest.memory.used_mib)} of {formatMib(latest.memory.total_mib)} used
            </dd>
            <dt>Disk</dt>
            <dd>
              {formatMib(latest.disk.used_mib)} of {formatMib(latest.disk.total_mib)} used
              <div class="meter" role="meter" aria-label="Disk use" aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.round(share(latest.disk))}>
                <span style={{ width: `${share(latest.disk)}%` }} />
              </div>
            </dd>
            <dt>Up</dt>
            <dd>{formatSeconds(latest.uptime_seconds)}</dd>
          </dl>
          <Processes processes={latest.processes} />
        </>
      )}
    </section>
  );
}

function Processes({ processes }: { processes: Schemas['ProcessMetrics'][] }) {
  if (processes.length === 0) return null;
  return (
    <>
      <h3>Busiest processes</h3>
      <Table label="Busiest processes" columns={['PID', 'Command', 'User', 'CPU', 'Memory']}>
        {processes.slice(0, 10).map((process) => (
          <tr key={process.pid}>
            <td>{process.pid}</td>
            <td>
              <code title={process.command}>{process.command || process.name}</code>
            </td>
            <td>{process.user ?? '—'}</td>
            <td class="number">{process.cpu_percent === null ? '—' : percent(process.cpu_percent)}</td>
            <td class="number">{formatMib(process.memory_mib)}</td>
          </tr>
        ))}
      </Table>
    </>
  );
}
