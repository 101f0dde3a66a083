// Webhooks: the account's endpoints with their delivery health and a form to add one. Each endpoint's
// own page (account/webhook-page.tsx) enables, disables, tests and deletes it and lists its deliveries.
import { api, ok, type Schemas } from '../api';
import { Link } from '../router';
import { useRefreshOn } from '../ui/live';
import { PageHeader, Time } from '../ui/kit';
import { ListView, onePage, usePagedList } from '../ui/paged-list';
import { Table } from '../ui/table';
import { CreateWebhookForm } from './account/webhook-create';
import { WebhookHealth } from './account/webhook-health';
export { WebhookPage } from './account/webhook-page';

export function WebhooksPage() {
  const webhooks = usePagedList(() => onePage(ok(api.GET('/v1/webhooks'))), []);
  useRefreshOn('webhook', webhooks.reload);
  return (
    <section>
      <PageHeader title="Webhooks" />
      <p class="lead">
        kiste sends the events you choose to your endpoints as signed HTTP POSTs (Standard Webhooks), retrying for about
        three days. At most 10 endpoints.
      </p>
      <h2>Your webhooks</h2>
      <ListView list={webhooks} empty="No webhooks yet.">
        {(items) => <WebhookTable webhooks={items} />}
      </ListView>
      <CreateWebhookForm onCreated={(webhook) => webhooks.update((items) => [...items.filter((item) => item.id !== webhook.id), webhook])} />
    </section>
  );
}

function WebhookTable({ webhooks }: { webhooks: Schemas['WebhookEndpoint'][] }) {
  return (
    <Table columns={['Name', 'URL', 'Events', 'Health', 'Last delivery']}>
      {webhooks.map((webhook) => (
        <tr key={webhook.id}>
          <th scope="row">
            <Link href={`/console/webhooks/${encodeURIComponent(webhook.id)}`}>{webhook.name}</Link>
          </th>
          <td>
            <code>{webhook.url}</code>
          </td>
          <td>{webhook.events.length === 1 ? <code>{webhook.events[0]}</code> : `${webhook.events.length} types`}</td>
          <td>
            <WebhookHealth webhook={webhook} />
          </td>
          <td>
            <Time iso={webhook.health.last_delivery_at} empty="none yet" />
          </td>
        </tr>
      ))}
    </Table>
  );
}
