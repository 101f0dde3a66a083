// The account's open (unacknowledged) alerts on the home page, with a way to the alerts page;
// refetched when an alert is raised or acknowledged.
import { api, ok } from '../api';
import { useAccountEvents } from '../events';
import { Link } from '../router';
import { ErrorNotice, Time, useLoad } from '../ui/kit';
import { useCoalesced } from './coalesce';

/** The newest few; the alerts page has them all, with their details. */
const SHOWN = 3;

export function OpenAlerts() {
  const alerts = useLoad(async () => (await ok(api.GET('/v1/alerts'))).filter((alert) => !alert.acknowledged_at), []);
  const refetch = useCoalesced(alerts.reload);
  useAccountEvents((event) => {
    if (event.resource_type === 'alert') refetch();
  });
  if (alerts.error && !alerts.data) return <ErrorNotice error={alerts.error} title="The alerts could not be read." />;
  const open = alerts.data ?? [];
  if (open.length === 0) return null;
  return (
    <section class="notice warning alerts" aria-labelledby="alerts-heading">
      <h2 id="alerts-heading">
        {open.length === 1 ? '1 open alert' : `${open.length} open alerts`}
      </h2>
      <ul>
        {open.slice(0, SHOWN).map((alert) => (
          <li key={alert.id}>
            {alert.title} <span class="hint">(<Time iso={alert.created_at} />)</span>
          </li>
        ))}
      </ul>
      <p>
        <Link href="/console/alerts">{open.length > SHOWN ? `See all ${open.length} alerts` : 'Review alerts'}</Link>
      </p>
    </section>
  );
}
