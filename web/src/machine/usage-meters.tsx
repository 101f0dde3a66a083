// The account's usage against its limits (GET /v1/status), as small meters. Refetched after events
// that change a count (machines, keys, webhooks); open SSH tunnels raise no event, so they are as of
// the last refetch.
import { api, ok, type Schemas } from '../api';
import { useAccountEvents } from '../events';
import { Loaded, useLoad } from '../ui/kit';
import { useCoalesced } from './coalesce';
import { formatMib } from './format';

type Status = Schemas['ControlPlaneStatusResponse'];

export function useAccountStatus() {
  const status = useLoad(() => ok(api.GET('/v1/status')), []);
  const refetch = useCoalesced(status.reload, 1000);
  useAccountEvents((event) => {
    if (event.type === 'instance.checkpointed' || event.resource_type === 'command' || event.resource_type === 'alert') return;
    refetch();
  });
  return status;
}

interface Row {
  label: string;
  used: number;
  limit: number;
  format?: (value: number) => string;
}

function rows({ usage, limits }: Status): Row[] {
  return [
    { label: 'Machines', used: usage.machines, limit: limits.machines },
    { label: 'Running machines', used: usage.running_machines, limit: limits.running_machines },
    { label: 'Disk', used: usage.disk_mib, limit: limits.disk_mib_total, format: formatMib },
    { label: 'SSH tunnels', used: usage.ssh_tunnels, limit: limits.ssh_tunnels },
    { label: 'API keys', used: usage.api_tokens, limit: limits.api_tokens },
    { label: 'Device keys', used: usage.device_keys, limit: limits.device_keys },
    { label: 'Webhooks', used: usage.webhooks, limit: limits.webhooks },
  ];
}

export function UsageMeters({ status }: { status: ReturnType<typeof useAccountStatus> }) {
  return (
    <section aria-labelledby="usage-heading">
      <h2 id="usage-heading">Usage</h2>
      <Loaded load={status}>
        {(data) => (
          <ul class="usage">
            {rows(data).map((row) => (
              <UsageMeter key={row.label} {...row} />
            ))}
          </ul>
        )}
      </Loaded>
    </section>
  );
}

function UsageMeter({ label, used, limit, format = String }: Row) {
  const share = limit > 0 ? Math.min(1, used / limit) : 1;
  const text = `${format(used)} of ${format(limit)}`;
  return (
    <li>
      <span class="usage-label">{label}</span>
      <span class="usage-figure">{text}</span>
      <div class={`meter${share >= 1 ? ' full' : ''}`} role="meter" aria-label={label} aria-valuemin={0} aria-valuemax={limit} aria-valuenow={used} aria-valuetext={text}>
        <span style={{ width: `${share * 100}%` }} />
      </div>
    </li>
  );
}
