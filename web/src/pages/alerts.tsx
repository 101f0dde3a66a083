// Alerts: what kiste thinks the account holder should know about (a new webhook, a failing one, a full
// disk, a machine error, an expiring key, a new sign-in). Open ones first, each with an acknowledge
// button; below, which kinds are e-mailed.
import { api, ok, type Schemas } from '../api';
import { useRefreshOn } from '../ui/live';
import { Button, ErrorNotice, PageHeader, Time, useAction } from '../ui/kit';
import { ListView, onePage, usePagedList } from '../ui/paged-list';
import { AlertPreferences } from './account/alert-preferences';
import { ResourceLink } from './account/resource-link';

type Alert = Schemas['AlertResponse'];

export function AlertsPage() {
  const alerts = usePagedList(() => onePage(ok(api.GET('/v1/alerts'))), []);
  useRefreshOn('alert', alerts.reload);
  const replace = (changed: Alert) => alerts.update((items) => items.map((item) => (item.id === changed.id ? changed : item)));
  return (
    <section>
      <PageHeader title="Alerts" />
      <ListView list={alerts} empty="No alerts. kiste raises one when something needs your attention.">
        {(items) => {
          const open = items.filter((alert) => !alert.acknowledged_at);
          const closed = items.filter((alert) => alert.acknowledged_at);
          return (
            <>
              <div class="section-header">
                <h2>Open alerts</h2>
                {open.length > 1 && <AcknowledgeAll alerts={open} onDone={alerts.reload} />}
              </div>
              {open.length === 0 ? <p class="hint">Nothing open: every alert is acknowledged.</p> : <AlertList alerts={open} onChanged={replace} />}
              {closed.length > 0 && (
                <>
                  <h2>Acknowledged</h2>
                  <AlertList alerts={closed} onChanged={replace} />
                </>
              )}
            </>
          );
        }}
      </ListView>
      <AlertPreferences />
    </section>
  );
}

/** The API acknowledges one alert at a time: one after another, then the list is read again. */
function AcknowledgeAll({ alerts, onDone }: { alerts: Alert[]; onDone(): void }) {
  const acknowledge = useAction(async () => {
    try {
      for (const alert of alerts) await ok(api.POST('/v1/alerts/{id}/acknowledge', { params: { path: { id: alert.id } } }));
    } finally {
      onDone();
    }
  });
  return (
    <div class="stack">
      <Button busy={acknowledge.busy} onClick={() => void acknowledge.run()}>
        Acknowledge all {alerts.length}
      </Button>
      <ErrorNotice error={acknowledge.error} />
    </div>
  );
}

function AlertList({ alerts, onChanged }: { alerts: Alert[]; onChanged(alert: Alert): void }) {
  return (
    <ul class="alert-list">
      {alerts.map((alert) => (
        <li key={alert.id}>
          <AlertItem alert={alert} onChanged={onChanged} />
        </li>
      ))}
    </ul>
  );
}

function AlertItem({ alert, onChanged }: { alert: Alert; onChanged(alert: Alert): void }) {
  const acknowledge = useAction(async () => onChanged(await ok(api.POST('/v1/alerts/{id}/acknowledge', { params: { path: { id: alert.id } } }))));
  const titleId = `alert-${alert.id}`;
  return (
    <article class={`alert card ${alert.acknowledged_at ? 'closed' : 'open'}`} aria-labelledby={titleId}>
      <div class="alert-main">
        <h3 id={titleId}>{alert.title}</h3>
        <p>{alert.detail}</p>
        <p class="meta">
          <span>
            Raised <Time iso={alert.created_at} />
          </span>
          <span>
            <code>{alert.kind}</code>
          </span>
          {alert.resource_type && alert.resource_id && (
            <span>
              <ResourceLink type={alert.resource_type} id={alert.resource_id} />
            </span>
          )}
          <span>{alert.emailed_at ? <>E-mailed <Time iso={alert.emailed_at} /></> : 'Not e-mailed'}</span>
          {alert.acknowledged_at && (
            <span>
              Acknowledged <Time iso={alert.acknowledged_at} />
            </span>
          )}
        </p>
        <ErrorNotice error={acknowledge.error} />
      </div>
      {!alert.acknowledged_at && (
        <Button busy={acknowledge.busy} onClick={() => void acknowledge.run()}>
          Acknowledge
        </Button>
      )}
    </article>
  );
}
