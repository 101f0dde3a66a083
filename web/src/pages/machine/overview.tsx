// The machine's fields (InstanceResponse): state, image and update, shape, checkpoints, lifetime.
import type { Instance } from '../../api';
import { StatusBadge, Time } from '../../ui/kit';
import { formatMib, formatSeconds } from '../../machine/format';

export function Overview({ instance }: { instance: Instance }) {
  return (
    <section aria-labelledby="overview-heading" class="card">
      <h2 id="overview-heading" class="visually-hidden">
        Overview
      </h2>
      <dl class="fields">
        <dt>Status</dt>
        <dd>
          <StatusBadge status={instance.status} />
          {instance.desired_state !== instance.status && <span class="hint"> on its way to {instance.desired_state}</span>}
          {instance.status === 'stopped' && instance.session_saved && <span class="hint"> with its memory saved (the next start resumes it)</span>}
        </dd>
        {instance.setup_error && (
          <>
            <dt>Setup</dt>
            <dd class="error-text">{instance.setup_error}</dd>
          </>
        )}
        <dt>Image version</dt>
        <dd>
          <code>{instance.image_version ?? instance.image}</code>
        </dd>
        <dt>Update available</dt>
        <dd>
          {instance.update_available ? (
            <>
              Yes: <code>{instance.latest_image_version}</code> (a restart or upgrade applies it)
            </>
          ) : (
            'No'
          )}
        </dd>
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
