// The machine's hosted services (published ports, docs/hosted-services.md): each with its port, who
// may use it, whether it answers and its URL (opened in a new tab, or copied); a form to publish a
// port; delete asks first. Kept current by the account's events about this machine's services, and
// read again when the machine's state changes: a service's status is worked out when it is read
// (the machine's state, then whether the port answers), so "Refresh" asks again too.
import { useState } from 'preact/hooks';
import { api, ok, type Instance, type Schemas } from '../../api';
import type { AccountEvent } from '../../events';
import { ConfirmAction } from '../../ui/confirm-action';
import { Button, CopyButton, ErrorNotice, Field, useAction } from '../../ui/kit';
import { useRefreshOn } from '../../ui/live';
import { ListView, usePagedList } from '../../ui/paged-list';
import { Table } from '../../ui/table';

type Service = Schemas['HostedServiceResponse'];

/** The API's rule for service names (CreateServiceRequest.name), for the input's `pattern`. */
const SERVICE_NAME_PATTERN = '[a-z0-9]([a-z0-9\\-]{0,50}[a-z0-9])?';

/** What each status means, for the hint under its badge (nothing for one that answers). */
function statusHint(service: Service): string | null {
  if (service.status === 'unreachable') return `Nothing answers on port ${service.port} (the app must listen on 0.0.0.0 or localhost).`;
  if (service.status === 'stopped') return 'The machine is not running.';
  return null;
}

export function ServicesTab({ instance }: { instance: Instance }) {
  const name = instance.name;
  // A machine has at most a few services (L14): one page holds them all.
  const services = usePagedList(
    (startingAfter) => ok(api.GET('/v1/instances/{name}/services', { params: { path: { name }, query: { limit: 100, starting_after: startingAfter } } })),
    [name, instance.status],
  );
  // service.created, service.deleted and service.status_changed: their data names the machine; an
  // event whose data does not counts when it is about a row shown here.
  const aboutThisMachine = (event: AccountEvent) =>
    (event.data as { instance_name?: unknown }).instance_name === name || Boolean(services.items?.some((service) => service.id === event.resource_id));
  useRefreshOn('hosted_service', services.reload, aboutThisMachine);

  return (
    <section aria-labelledby="services-heading" class="services-tab">
      <div class="toolbar">
        <h2 id="services-heading">Services</h2>
        <Button onClick={services.reload} busy={services.loading && services.items !== undefined}>
          Refresh
        </Button>
      </div>
      <p class="lead">
        Publish a port of this machine at a URL of its own: kiste's proxy carries HTTP, WebSockets and streamed answers to the app
        listening on it.
      </p>
      <ListView
        list={services}
        loadingLabel="Loading services…"
        empty={
          <>
            No ports published yet. Publish one below, or with <code>POST /v1/instances/{name}/services</code>.
          </>
        }
      >
        {(items) => (
          <Table label="Services" columns={['Name', 'Port', 'Access', 'Status', 'URL']} actions>
            {items.map((service) => (
              <ServiceRow
                key={service.id}
                machine={name}
                service={service}
                onChanged={(changed) => services.update((rows) => rows.map((row) => (row.id === changed.id ? changed : row)))}
                onDeleted={() => services.update((rows) => rows.filter((row) => row.id !== service.id))}
              />
            ))}
          </Table>
        )}
      </ListView>
      <PublishForm machine={name} onCreated={(created) => services.update((rows) => [...rows.filter((row) => row.id !== created.id), created])} />
    </section>
  );
}

function ServiceRow({ machine, service, onChanged, onDeleted }: { machine: string; service: Service; onChanged(service: Service): void; onDeleted(): void }) {
  const hint = statusHint(service);
  const path = { params: { path: { name: machine, service: service.name } } };
  const setAccess = async (access: Service['access']) => onChanged(await ok(api.PATCH('/v1/instances/{name}/services/{service}', { ...path, body: { access } })));
  return (
    <tr>
      <th scope="row">
        {service.name}
        {service.description && <span class="hint">{service.description}</span>}
      </th>
      <td class="number">{service.port}</td>
      <td>
        <AccessBadge access={service.access} />
        {service.wake_on_request && <span class="hint">wakes the machine on a request</span>}
      </td>
      <td class="service-status">
        <span class={`badge status-${service.status}`}>{service.status}</span>
        {hint && <span class="hint">{hint}</span>}
      </td>
      <td>
        <div class="service-url">
          <a href={service.public_url} target="_blank" rel="noopener noreferrer">
            {breakable(service.public_url)}
          </a>
          <CopyButton value={service.public_url} label="Copy URL" />
        </div>
      </td>
      <td class="row-actions">
        {service.access === 'public' ? (
          <ConfirmAction label="Make private" question={`Make “${service.name}” private?`} detail={<p>Only your account can use its URL from then on.</p>} confirmLabel="Make private" action={() => setAccess('account')} />
        ) : (
          <ConfirmAction
            label="Make public"
            question={`Make “${service.name}” public?`}
            detail={<p>Anyone with its URL can then use the app on port {service.port}, without signing in.</p>}
            confirmLabel="Make public"
            danger
            action={() => setAccess('public')}
          />
        )}
        <ConfirmAction
          label="Delete"
          question={`Delete the service “${service.name}”?`}
          detail={
            <p>
              Its URL stops working at once and is not given out again; the app in the machine keeps running. Port {service.port} can be
              published again, under a new URL.
            </p>
          }
          confirmLabel="Delete service"
          danger
          action={async () => {
            await ok(api.DELETE('/v1/instances/{name}/services/{service}', path));
            onDeleted();
          }}
        />
      </td>
    </tr>
  );
}

/** A URL that, where it must wrap, wraps after a dot or slash rather than inside the host's name. */
function breakable(url: string) {
  return url.split(/(?<=[./])/).map((part, index) => (index === 0 ? part : [<wbr key={index} />, part]));
}

function AccessBadge({ access }: { access: Service['access'] }) {
  return access === 'public' ? (
    <span class="badge access-public" title="Anyone with the URL can use it">
      public
    </span>
  ) : (
    <span class="badge access-private" title="Only your account can use it">
      private
    </span>
  );
}

function PublishForm({ machine, onCreated }: { machine: string; onCreated(service: Service): void }) {
  const [name, setName] = useState('');
  const [port, setPort] = useState('');
  const [description, setDescription] = useState('');
  const [open, setOpen] = useState(false);
  const publish = useAction(async () => {
    const body = { name: name.trim(), port: Number(port), access: open ? ('public' as const) : ('account' as const), ...(description.trim() ? { description: description.trim() } : {}) };
    const created = await ok(api.POST('/v1/instances/{name}/services', { params: { path: { name: machine } }, body }));
    setName('');
    setPort('');
    setDescription('');
    setOpen(false);
    onCreated(created);
  });

  return (
    <section aria-labelledby="publish-service" class="panel publish-service">
      <h2 id="publish-service">Publish a port</h2>
      <form
        onSubmit={(event) => {
          event.preventDefault();
          void publish.run();
        }}
      >
        <div class="form-row">
          <Field label="Name" id="service-name" hint="Lower-case letters, digits and hyphens; it begins the URL.">
            <input
              id="service-name"
              required
              maxLength={52}
              pattern={SERVICE_NAME_PATTERN}
              autoComplete="off"
              spellcheck={false}
              aria-describedby="service-name-hint"
              value={name}
              onInput={(e) => setName(e.currentTarget.value)}
            />
          </Field>
          <div class="field port-field">
            <label for="service-port">Port</label>
            <input id="service-port" type="number" required min={1} max={65535} step={1} inputMode="numeric" aria-describedby="service-port-hint" value={port} onInput={(e) => setPort(e.currentTarget.value)} />
            <p class="hint" id="service-port-hint">
              Where the app listens.
            </p>
          </div>
          <Field label="Description" id="service-description" hint="Optional.">
            <input id="service-description" maxLength={500} aria-describedby="service-description-hint" value={description} onInput={(e) => setDescription(e.currentTarget.value)} />
          </Field>
        </div>
        <div class="choice-with-hint">
          <label class="choice" for="service-public">
            <input id="service-public" type="checkbox" checked={open} aria-describedby="service-public-hint" onChange={(e) => setOpen(e.currentTarget.checked)} />
            Public — anyone with the URL
          </label>
          <p class="hint" id="service-public-hint">
            Unticked, the service is private: only your account can use its URL.
          </p>
        </div>
        <Button type="submit" variant="primary" busy={publish.busy}>
          Publish port
        </Button>
      </form>
      <ErrorNotice error={publish.error} />
    </section>
  );
}
