// One environment: its current version (repositories, variables, secret file paths, setup script),
// the form that publishes the next version, and every version before (newest first, each one
// unfolds). Machines keep the version they were created with, so an edit changes no machine.
import { Fragment } from 'preact';
import { useState } from 'preact/hooks';
import { api, ok } from '../../api';
import { Link } from '../../router';
import { useRefreshOn } from '../../ui/live';
import { Button, Loaded, PageHeader, Time, useLoad } from '../../ui/kit';
import { Table } from '../../ui/table';
import { fetchVersions, type EnvironmentDetail, type EnvironmentVersion } from './data';
import { EnvironmentForm } from './environment-form';
import { summarizeVersion, VersionView } from './version-view';

export function EnvironmentPage({ name }: { name: string }) {
  const environment = useLoad(() => ok(api.GET('/v1/environments/{name}', { params: { path: { name } } })), [name]);
  const versions = useLoad(() => fetchVersions(name), [name]);
  const [editing, setEditing] = useState(false);
  const [published, setPublished] = useState<number | null>(null);
  const refresh = () => {
    environment.reload();
    versions.reload();
  };
  useRefreshOn('environment', refresh, (event) => event.resource_id === environment.data?.id);
  return (
    <section class="environment-page">
      <p class="breadcrumb">
        <Link href="/console/environments">Environments</Link>
      </p>
      {environment.data === undefined && <PageHeader title={name} />}
      <Loaded load={environment}>
        {(detail) => (
          <>
            <PageHeader title={detail.name}>
              <span class="badge status-current">Version {detail.current_version}</span>
              {!editing && (
                <Button
                  variant="primary"
                  onClick={() => {
                    setPublished(null);
                    setEditing(true);
                  }}
                >
                  Edit environment
                </Button>
              )}
            </PageHeader>
            {published !== null && !editing && (
              <p class="notice success" role="status">
                Version {published} published. New machines get it; machines created before keep their version.
              </p>
            )}
            {editing ? (
              <EditEnvironment
                detail={detail}
                onCancel={() => setEditing(false)}
                onSaved={(saved) => {
                  environment.set(saved);
                  versions.reload();
                  setPublished(saved.current_version);
                  setEditing(false);
                }}
              />
            ) : (
              <CurrentVersion detail={detail} />
            )}
          </>
        )}
      </Loaded>
      <h2 id="history-heading">Version history</h2>
      <Loaded load={versions}>{(items) => <VersionHistory versions={items} />}</Loaded>
    </section>
  );
}

function CurrentVersion({ detail }: { detail: EnvironmentDetail }) {
  return (
    <section aria-labelledby="current-heading" class="card">
      <h2 id="current-heading" class="card-title">
        Current version: {detail.current_version}
        <span class="hint inline">
          published <Time iso={detail.current.created_at} />
        </span>
      </h2>
      <VersionView version={detail.current} />
    </section>
  );
}

function EditEnvironment({ detail, onCancel, onSaved }: { detail: EnvironmentDetail; onCancel(): void; onSaved(detail: EnvironmentDetail): void }) {
  return (
    <section aria-labelledby="edit-heading" class="panel">
      <h2 id="edit-heading">Edit {detail.name}</h2>
      <p class="notice info">
        Saving publishes version {detail.current_version + 1}. Machines created from now on get it; machines created before
        keep the version they were created with.
      </p>
      <EnvironmentForm
        current={detail.current}
        submitLabel={`Publish version ${detail.current_version + 1}`}
        onCancel={onCancel}
        onSubmit={async (body) => onSaved(await ok(api.PUT('/v1/environments/{name}', { params: { path: { name: detail.name } }, body })))}
      />
    </section>
  );
}

function VersionHistory({ versions }: { versions: EnvironmentVersion[] }) {
  const [open, setOpen] = useState<string | null>(null);
  return (
    <Table label="Version history" columns={['Version', 'Published', 'Contents']} actions>
      {versions.map((version, index) => (
        <Fragment key={version.id}>
          <tr class={open === version.id ? 'current' : undefined}>
            <th scope="row">
              Version {version.version}
              {index === 0 && <span class="badge status-current">current</span>}
            </th>
            <td>
              <Time iso={version.created_at} />
            </td>
            <td>{summarizeVersion(version)}</td>
            <td class="row-actions">
              <Button onClick={() => setOpen(open === version.id ? null : version.id)} aria-expanded={open === version.id ? 'true' : 'false'} aria-label={`${open === version.id ? 'Hide' : 'Show'} version ${version.version}`}>
                {open === version.id ? 'Hide' : 'Show'}
              </Button>
            </td>
          </tr>
          {open === version.id && (
            <tr class="version-detail">
              <td colSpan={4}>
                <VersionView version={version} headingLevel={4} />
              </td>
            </tr>
          )}
        </Fragment>
      ))}
    </Table>
  );
}
