// The machine's fields (InstanceResponse): state, image, its components and update, environment
// version and setup, shape, checkpoints, lifetime.
import { api, ok, type Instance } from '../../api';
import { Link } from '../../router';
import { StatusBadge, Time, useLoad } from '../../ui/kit';
import { formatMib, formatSeconds, machinePath } from '../../machine/format';
import { imagePath, UNIVERSAL } from '../images/data';
import { environmentPath } from '../environments/data';

export function Overview({ instance }: { instance: Instance }) {
  return (
    <section aria-labelledby="overview-heading" class="card">
      <h2 id="overview-heading" class="visually-hidden">
        Overview
      </h2>
      {instance.update_available && (
        <p class="notice info" role="status">
          <strong>Update available:</strong> the image version <code>{instance.latest_image_version}</code> is served now (this machine
          has <code>{instance.image_version}</code>). A restart or upgrade applies it.
        </p>
      )}
      <dl class="fields">
        <dt>Status</dt>
        <dd>
          <StatusBadge status={instance.status} />
          {instance.desired_state !== instance.status && <span class="hint"> on its way to {instance.desired_state}</span>}
          {instance.status === 'stopped' && instance.session_saved && <span class="hint"> with its memory saved (the next start resumes it)</span>}
        </dd>
        <dt>Image</dt>
        <dd>
          <ImageName reference={instance.image} />
        </dd>
        <dt>Image version</dt>
        <dd>
          <code>{instance.image_version ?? '—'}</code>
          {instance.update_available ? (
            <span class="badge status-pending update-badge">update available</span>
          ) : (
            instance.image_version && <span class="hint"> (the served version)</span>
          )}
        </dd>
        <dt>Components</dt>
        <dd>
          <Components instance={instance} />
        </dd>
        <dt>Environment</dt>
        <dd>
          <EnvironmentVersionLink instance={instance} />
        </dd>
        {instance.setup_status !== 'none' && (
          <>
            <dt>Setup</dt>
            <dd>
              <StatusBadge status={instance.setup_status} />{' '}
              <Link href={machinePath(instance.name, 'setup')}>Setup steps and output</Link>
              {instance.setup_error && <p class="error-text setup-error">{instance.setup_error}</p>}
            </dd>
          </>
        )}
        <dt>Shape</dt>
        <dd>
          {instance.vcpu} vCPU{instance.vcpu === 1 ? '' : 's'}, {formatMib(instance.memory_mib)} memory, {formatMib(instance.disk_mib)} disk
        </dd>
        <dt>Checkpoints</dt>
        <dd>Every {formatSeconds(instance.auto_snapshot_seconds)} when the disk changed</dd>
        <dt>Last checkpoint</dt>
        <dd>
          <Time iso={instance.last_checkpoint_at} empty="none yet" />
          {instance.last_offsite_at && (
            <span class="hint">
              {' '}
              (off-site copy <Time iso={instance.last_offsite_at} />)
            </span>
          )}
        </dd>
        <dt>Automatic stop</dt>
        <dd>
          <Time iso={instance.expires_at} empty="never" />
        </dd>
        {instance.ssh_host && (
          <>
            <dt>SSH</dt>
            <dd>
              <code>
                {instance.ssh_host}
                {instance.ssh_port ? `:${instance.ssh_port}` : ''}
              </code>
            </dd>
          </>
        )}
        <dt>Created</dt>
        <dd>
          <Time iso={instance.created_at} />
        </dd>
        <dt>ID</dt>
        <dd>
          <code>{instance.id}</code>
        </dd>
      </dl>
    </section>
  );
}

function Components({ instance }: { instance: Instance }) {
  const components = instance.components;
  if (components.length === 0) return <span class="hint">none recorded</span>;
  return (
    <details class="components">
      <summary>
        {components.length} component{components.length === 1 ? '' : 's'}
      </summary>
      <ul class="code-list">
        {components.map((component) => (
          <li key={component.id}>
            <code>
              {component.id} {component.version}
            </code>
          </li>
        ))}
      </ul>
    </details>
  );
}

/** The environment and version number an instance was created with (its setup answers them; the instance only has the version's id). */
export function EnvironmentVersionLink({ instance }: { instance: Instance }) {
  const id = instance.environment_version_id ?? null;
  const setup = useLoad(async () => (id ? fetchSetup(instance.name) : null), [instance.name, id]);
  if (!id) return <>None</>;
  const applied = setup.data;
  if (applied?.environment_name) {
    return (
      <>
        <Link href={environmentPath(applied.environment_name)}>{applied.environment_name}</Link>, version {applied.environment_version}
      </>
    );
  }
  return <code title="Environment version id">{id}</code>;
}

export function fetchSetup(name: string) {
  return ok(api.GET('/v1/instances/{name}/setup', { params: { path: { name } } }));
}

/** The image the machine was made from, by name: the instance records the reference it was created with (id, slug or name). */
function ImageName({ reference }: { reference: string }) {
  const image = useLoad(async () => (reference === UNIVERSAL ? null : ok(api.GET('/v1/images/{id}', { params: { path: { id: reference } } }))), [reference]);
  if (reference === UNIVERSAL) return <Link href={imagePath(UNIVERSAL)}>Universal</Link>;
  if (image.error) return <code title="The image is deleted">{reference}</code>;
  return <Link href={imagePath(reference)}>{image.data?.name ?? reference}</Link>;
}
