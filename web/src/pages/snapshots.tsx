// Snapshots: the account's named snapshots (docs/snapshots.md) with what each holds (disk, or disk and
// memory), its state, its size and the machine it was taken of; "New machine" opens the create page
// from it, "Delete" asks first. Taking one is the machine page's "Snapshot" action. Kept current by
// the account's snapshot events (taken, ready, failed, deleted).
import { api, ok, type Schemas } from '../api';
import { Link } from '../router';
import { ConfirmAction } from '../ui/confirm-action';
import { PageHeader, Time } from '../ui/kit';
import { useRefreshOn } from '../ui/live';
import { ListView, usePagedList } from '../ui/paged-list';
import { Table } from '../ui/table';
import { describeShape } from '../machine/shapes';
import { formatMib, machinePath } from '../machine/format';

type Snapshot = Schemas['SnapshotResponse'];

export function SnapshotsPage() {
  const snapshots = usePagedList((startingAfter) => ok(api.GET('/v1/snapshots', { params: { query: { limit: 100, starting_after: startingAfter } } })), []);
  useRefreshOn('snapshot', snapshots.reload);
  return (
    <section class="snapshots">
      <PageHeader title="Snapshots" />
      <p class="lead">
        A snapshot keeps a machine's disk, and by default its memory, under a name. Machines made from it start where it was — with
        its memory, programs run on — each with its own host name and SSH host keys. Snapshots stay when their machine is deleted. Take
        one with <strong>Snapshot</strong> on a machine's page, or <code>kiste snapshot MACHINE NAME</code>. At most 20 per account.
      </p>
      <ListView list={snapshots} loadingLabel="Loading snapshots…" empty={<>No snapshots yet. Open a machine and choose <strong>Snapshot</strong>.</>}>
        {(items) => (
          <Table label="Snapshots" columns={['Name', 'Machine', 'Holds', 'Status', 'Size', 'Taken']} actions>
            {items.map((snapshot) => (
              <SnapshotRow key={snapshot.id} snapshot={snapshot} onDeleted={() => snapshots.update((rows) => rows.filter((row) => row.id !== snapshot.id))} />
            ))}
          </Table>
        )}
      </ListView>
    </section>
  );
}

function SnapshotRow({ snapshot, onDeleted }: { snapshot: Snapshot; onDeleted(): void }) {
  return (
    <tr>
      <th scope="row">
        {snapshot.name}
        <span class="hint">{describeShape(snapshot.source)}</span>
      </th>
      <td>
        {snapshot.instance_id ? <Link href={machinePath(snapshot.instance_name)}>{snapshot.instance_name}</Link> : <>{snapshot.instance_name} <span class="hint">deleted</span></>}
      </td>
      <td>{snapshot.memory ? 'disk and memory' : 'disk'}</td>
      <td>
        <span class={`badge status-${snapshot.status}`}>{snapshot.status === 'pending' ? `taking${snapshot.progress ? ` ${Math.round(snapshot.progress * 100)} %` : '…'}` : snapshot.status}</span>
        {snapshot.error && <span class="hint error-text">{snapshot.error}</span>}
      </td>
      <td class="number">{snapshot.size_mib === null ? '—' : formatMib(snapshot.size_mib)}</td>
      <td>
        <Time iso={snapshot.created_at} />
      </td>
      <td class="row-actions">
        {snapshot.status === 'ready' && (
          <Link class="button" href={`/console/new?snapshot=${encodeURIComponent(snapshot.id)}`} aria-label={`New machine from ${snapshot.name}`}>
            New machine
          </Link>
        )}
        {snapshot.status !== 'pending' && (
          <ConfirmAction
            label="Delete"
            question={`Delete the snapshot “${snapshot.name}”?`}
            detail={<p>It cannot be used to make machines any more. Machines already made from it keep running and keep their disks.</p>}
            confirmLabel="Delete snapshot"
            danger
            action={async () => {
              await ok(api.DELETE('/v1/snapshots/{id}', { params: { path: { id: snapshot.id } } }));
              onDeleted();
            }}
          />
        )}
      </td>
    </tr>
  );
}
