// A webhook's deliveries, newest first: each message with its latest attempt (state, HTTP status,
// time taken, why it failed, when it is tried again) and the start of the receiver's answer.
import type { Schemas } from '../../api';
import { StatusBadge, Time } from '../../ui/kit';
import { ListView, type PagedList } from '../../ui/paged-list';
import { Table } from '../../ui/table';

type Delivery = Schemas['WebhookDelivery'];

export function DeliveryTable({ list }: { list: PagedList<Delivery> }) {
  return (
    <ListView list={list} empty="No deliveries yet. Send a test event to try the endpoint.">
      {(deliveries) => (
        <Table columns={['Created', 'Event', 'State', 'Attempt', 'HTTP', 'Time', 'Outcome']}>
          {deliveries.map((delivery) => (
            <DeliveryRow key={delivery.id} delivery={delivery} />
          ))}
        </Table>
      )}
    </ListView>
  );
}

function DeliveryRow({ delivery }: { delivery: Delivery }) {
  return (
    <tr>
      <td>
        <Time iso={delivery.created_at} />
      </td>
      <td>
        <code>{delivery.event_type}</code>
        {delivery.event_sequence !== null && <span class="hint inline">#{delivery.event_sequence}</span>}
      </td>
      <td>
        <StatusBadge status={delivery.state} />
      </td>
      <td>{delivery.attempt}</td>
      <td>{delivery.http_status ?? '—'}</td>
      <td>{delivery.duration_ms === null ? '—' : `${delivery.duration_ms} ms`}</td>
      <td class="outcome">
        {delivery.error && <span>{delivery.error}</span>}
        {delivery.next_attempt_at && (
          <span class="hint">
            Next attempt <Time iso={delivery.next_attempt_at} />
          </span>
        )}
        {delivery.response_excerpt && (
          <details>
            <summary>Response</summary>
            <pre class="excerpt">{delivery.response_excerpt}</pre>
          </details>
        )}
        {!delivery.error && !delivery.next_attempt_at && !delivery.response_excerpt && '—'}
      </td>
    </tr>
  );
}
