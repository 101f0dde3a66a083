// One webhook endpoint: its settings and health, enable/disable, a test delivery, delete, and its last
// 50 deliveries (newest first) with each latest attempt's outcome.
import { useState } from 'preact/hooks';
import { api, ok, type Schemas } from '../../api';
import { Link, navigate } from '../../router';
import { useRefreshOn } from '../../ui/live';
import { Button, ConfirmButton, ErrorNotice, Loaded, PageHeader, Time, useAction, useLoad } from '../../ui/kit';
import { onePage, usePagedList } from '../../ui/paged-list';
import { DeliveryTable } from './webhook-deliveries';
import { WebhookHealth } from './webhook-health';

type Webhook = Schemas['WebhookEndpoint'];

export function WebhookPage({ id }: { id: string }) {
  const webhook = useLoad(() => ok(api.GET('/v1/webhooks/{id}', { params: { path: { id } } })), [id]);
  const deliveries = usePagedList(() => onePage(ok(api.GET('/v1/webhooks/{id}/deliveries', { params: { path: { id } } }))), [id]);
  const refresh = () => {
    webhook.reload();
    deliveries.reload();
  };
  useRefreshOn('webhook', refresh, (event) => event.resource_id === id);
  return (
    <section>
      <p class="breadcrumb">
        <Link href="/console/webhooks">Webhooks</Link>
      </p>
      {webhook.data === undefined && <PageHeader title="Webhook" />}
      <Loaded load={webhook}>
        {(endpoint) => (
          <>
            <PageHeader title={endpoint.name}>
              <WebhookActions webhook={endpoint} onChanged={webhook.set} onTested={refresh} />
            </PageHeader>
            <WebhookFields webhook={endpoint} />
          </>
        )}
      </Loaded>
      <div class="section-header">
        <h2>Deliveries</h2>
        <Button busy={deliveries.loading && deliveries.items !== undefined} onClick={deliveries.reload}>
          Refresh deliveries
        </Button>
      </div>
      <DeliveryTable list={deliveries} />
    </section>
  );
}

function WebhookFields({ webhook }: { webhook: Webhook }) {
  const health = webhook.health;
  return (
    <dl class="fields card">
      <dt>URL</dt>
      <dd>
        <code>{webhook.url}</code>
      </dd>
      <dt>Sending</dt>
      <dd>{webhook.enabled ? 'Enabled' : <>Disabled{webhook.disabled_reason && <> — {webhook.disabled_reason}</>}</>}</dd>
      <dt>Health</dt>
      <dd>
        <WebhookHealth webhook={webhook} />
      </dd>
      <dt>Last delivery</dt>
      <dd>
        <Time iso={health.last_delivery_at} empty="none yet" />
      </dd>
      <dt>Last success</dt>
      <dd>
        <Time iso={health.last_success_at} empty="none yet" />
      </dd>
      <dt>Event types</dt>
      <dd>
        <ul class="code-list">
          {webhook.events.map((type) => (
            <li key={type}>
              <code>{type}</code>
            </li>
          ))}
        </ul>
      </dd>
      <dt>Created</dt>
      <dd>
        <Time iso={webhook.created_at} />
      </dd>
      <dt>Id</dt>
      <dd>
        <code>{webhook.id}</code>
      </dd>
    </dl>
  );
}

function WebhookActions({ webhook, onChanged, onTested }: { webhook: Webhook; onChanged(webhook: Webhook): void; onTested(): void }) {
  const [tested, setTested] = useState<Schemas['WebhookDelivery'] | null>(null);
  const path = { params: { path: { id: webhook.id } } };
  const toggle = useAction(async () => onChanged(await ok(api.PATCH('/v1/webhooks/{id}', { ...path, body: { enabled: !webhook.enabled } }))));
  const test = useAction(async () => {
    setTested(null);
    setTested(await ok(api.POST('/v1/webhooks/{id}/test', path)));
    onTested();
  });
  const remove = useAction(async () => {
    await ok(api.DELETE('/v1/webhooks/{id}', path));
    navigate('/console/webhooks');
  });
  return (
    <div class="stack">
      <div class="actions">
        <Button busy={test.busy} onClick={() => void test.run()}>
          Send test event
        </Button>
        <Button busy={toggle.busy} onClick={() => void toggle.run()}>
          {webhook.enabled ? 'Disable webhook' : 'Enable webhook'}
        </Button>
        <ConfirmButton
          label="Delete webhook"
          question={`Delete the webhook “${webhook.name}”?`}
          detail="Nothing more is sent to it and its delivery history is removed."
          confirmLabel="Delete"
          danger
          busy={remove.busy}
          onConfirm={() => void remove.run()}
        />
      </div>
      {tested && <TestResult delivery={tested} />}
      <ErrorNotice error={test.error ?? toggle.error ?? remove.error} />
    </div>
  );
}

function TestResult({ delivery }: { delivery: Schemas['WebhookDelivery'] }) {
  const succeeded = delivery.state === 'succeeded';
  return (
    <p class={`notice ${succeeded ? 'success' : 'warning'}`} role="status">
      {succeeded ? 'Test event delivered' : 'Test delivery failed'}
      {delivery.http_status !== null && <>: HTTP {delivery.http_status}</>}
      {delivery.duration_ms !== null && <> in {delivery.duration_ms} ms</>}
      {delivery.error && <> — {delivery.error}</>}
      {delivery.state === 'retrying' && <>; kiste tries again <Time iso={delivery.next_attempt_at} /></>}
    </p>
  );
}
