// One image (the built-in one too): its status, how it is made, its components at their exact
// versions, the build of a derived layer with its log, and delete. Kept current by image events and,
// while a build runs, by reading it again every few seconds (a build's progress has no events).
import { useEffect, useState } from 'preact/hooks';
import { api, ok } from '../../api';
import { Link, navigate } from '../../router';
import { useRefreshOn } from '../../ui/live';
import { Button, ConfirmButton, ErrorNotice, Loaded, PageHeader, StatusBadge, Time, useAction, useLoad } from '../../ui/kit';
import { Table } from '../../ui/table';
import { pause, usePageVisible } from '../../visible';
import { deleteImage, deleteImageQuestion, BuildState } from './image-table';
import { describeOs, describeResources, describeStrategy, type Image } from './data';

const BUILD_POLL_MS = 5_000;

export function ImagePage({ id }: { id: string }) {
  const image = useLoad(() => ok(api.GET('/v1/images/{id}', { params: { path: { id } } })), [id]);
  useRefreshOn('image', image.reload, (event) => event.resource_id === image.data?.id);
  useWhileBuilding(image.data ? [image.data] : [], image.reload);
  return (
    <section class="image-page">
      <p class="breadcrumb">
        <Link href="/console/images">Images</Link>
      </p>
      {image.data === undefined && <PageHeader title="Image" />}
      <Loaded load={image}>
        {(data) => (
          <>
            <PageHeader title={data.name}>
              <StatusBadge status={data.status} />
              {!data.builtin && <DeleteImage image={data} />}
            </PageHeader>
            <ImageFields image={data} />
            <h2>Components</h2>
            <Table label="Image components" columns={['Component', 'Version']}>
              {data.components.map((component) => (
                <tr key={component.id}>
                  <th scope="row">
                    <code>{component.id}</code>
                  </th>
                  <td>
                    <code>{component.version}</code>
                  </td>
                </tr>
              ))}
            </Table>
            {data.build && <BuildSection image={data} />}
          </>
        )}
      </Loaded>
    </section>
  );
}

/** Reads again every few seconds while one of `images` is building and the tab is shown. */
export function useWhileBuilding(images: Image[], reload: () => void): void {
  const building = images.some((image) => image.status === 'building');
  const visible = usePageVisible();
  useEffect(() => {
    if (!building || !visible) return;
    const controller = new AbortController();
    void (async () => {
      while (!controller.signal.aborted) {
        await pause(BUILD_POLL_MS, controller.signal);
        if (!controller.signal.aborted) reload();
      }
    })();
    return () => controller.abort();
  }, [building, visible]);
}

function ImageFields({ image }: { image: Image }) {
  return (
    <dl class="fields card">
      <dt>Status</dt>
      <dd>
        <StatusBadge status={image.status} />
        {image.status === 'building' && <BuildState image={image} />}
      </dd>
      <dt>Made as</dt>
      <dd>{describeStrategy(image.build_strategy)}</dd>
      {!image.builtin && (
        <>
          <dt>Based on</dt>
          <dd>
            <code>{image.base_image ?? 'universal'}</code>
          </dd>
        </>
      )}
      <dt>System</dt>
      <dd>{describeOs(image.os)}</dd>
      <dt>Resources</dt>
      <dd>{image.resources ? describeResources(image.resources) : <span class="hint inline">none asked for (the machine's own shape)</span>}</dd>
      <dt>Slug</dt>
      <dd>
        <code>{image.slug}</code>
      </dd>
      <dt>Artifact key</dt>
      <dd>
        <code>{image.artifact_key}</code>
      </dd>
      <dt>Created</dt>
      <dd>
        <Time iso={image.created_at} />
      </dd>
      <dt>Id</dt>
      <dd>
        <code>{image.id}</code>
      </dd>
    </dl>
  );
}

function BuildSection({ image }: { image: Image }) {
  const build = image.build!;
  const [showLog, setShowLog] = useState(image.status === 'failed');
  return (
    <section aria-labelledby="build-heading">
      <div class="section-header">
        <h2 id="build-heading">Build</h2>
        <Button onClick={() => setShowLog(!showLog)} aria-expanded={showLog ? 'true' : 'false'}>
          {showLog ? 'Hide build log' : 'Show build log'}
        </Button>
      </div>
      <dl class="fields card">
        <dt>Step</dt>
        <dd>{build.step ?? '—'}</dd>
        <dt>Progress</dt>
        <dd>{build.progress_percent}%</dd>
        <dt>Started</dt>
        <dd>
          <Time iso={build.started_at} empty="not yet" />
        </dd>
        <dt>Finished</dt>
        <dd>
          <Time iso={build.finished_at} empty="not yet" />
          {build.duration_ms !== null && <span class="hint inline">in {Math.round(build.duration_ms / 1000)} s</span>}
        </dd>
        {build.packages.length > 0 && (
          <>
            <dt>Packages</dt>
            <dd>
              <ul class="code-list">
                {build.packages.map((line) => (
                  <li key={line}>
                    <code>{line}</code>
                  </li>
                ))}
              </ul>
            </dd>
          </>
        )}
        {build.error && (
          <>
            <dt>Error</dt>
            <dd>
              <pre class="excerpt error-text">{build.error}</pre>
            </dd>
          </>
        )}
      </dl>
      {showLog && <BuildLog image={image} />}
    </section>
  );
}

function BuildLog({ image }: { image: Image }) {
  // Read again when the build moves on (its step or status changes).
  const log = useLoad(() => ok(api.GET('/v1/images/{id}/build-log', { params: { path: { id: image.id } } })), [image.id, image.status, image.build?.step]);
  return (
    <Loaded load={log}>
      {(answer) => (
        <>
          {answer.truncated && <p class="hint">Earlier output was dropped: only the last 256 KiB are kept.</p>}
          <pre class="log" tabIndex={0} aria-label="Build log">
            {answer.log || '(nothing logged yet)'}
          </pre>
        </>
      )}
    </Loaded>
  );
}

function DeleteImage({ image }: { image: Image }) {
  const remove = useAction(async () => {
    await deleteImage(image);
    navigate('/console/images');
  });
  return (
    <div class="stack">
      <ConfirmButton
        label="Delete image"
        {...deleteImageQuestion(image)}
        confirmLabel="Delete"
        danger
        busy={remove.busy}
        onConfirm={() => void remove.run()}
      />
      <ErrorNotice error={remove.error} />
    </div>
  );
}
