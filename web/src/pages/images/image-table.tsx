// The account's private images: status (a building one with its progress and step), components,
// how it is made, and delete (refused with 409 K21 while a machine uses the image: said in the row).
import { Fragment } from 'preact';
import { useState } from 'preact/hooks';
import { api, ApiError, ok } from '../../api';
import { Link } from '../../router';
import { ConfirmButton, ErrorNotice, StatusBadge, Time, useAction } from '../../ui/kit';
import { machinePath } from '../../machine/format';
import { Table } from '../../ui/table';
import { imagePath, type Image } from './data';

/** A building image's progress (a meter and the builder's step), a failed one's reason. */
export function BuildState({ image }: { image: Image }) {
  const build = image.build;
  if (image.status === 'building') {
    const percent = build?.progress_percent ?? 0;
    return (
      <div class="build-state">
        <div class="meter" role="meter" aria-label={`Build of ${image.name}`} aria-valuemin={0} aria-valuemax={100} aria-valuenow={percent}>
          <span style={{ width: `${percent}%` }} />
        </div>
        <span class="hint">
          {percent}%{build?.step ? ` — ${build.step}` : ''}
        </span>
      </div>
    );
  }
  if (image.status === 'failed' && build?.error) {
    return (
      <div class="build-state">
        <span class="hint error-text">{firstLine(build.error)}</span>
      </div>
    );
  }
  return null;
}

function firstLine(text: string): string {
  const line = text.split('\n')[0] ?? '';
  return line.length > 160 ? `${line.slice(0, 157)}…` : line;
}

export function deleteImage(image: Image): Promise<unknown> {
  return ok(api.DELETE('/v1/images/{id}', { params: { path: { id: image.id } } }));
}

/** What deleting an image asks before it goes, from its row and from its page alike. */
export function deleteImageQuestion(image: Image): { question: string; detail: string } {
  return {
    question: `Delete the image “${image.name}”?`,
    detail: 'Machines can no longer be created from it. An image a machine uses cannot be deleted.',
  };
}

export function ImageTable({ images, onDeleted }: { images: Image[]; onDeleted(image: Image): void }) {
  return (
    <Table label="Your images" class="images" columns={['Name', 'Status', 'Components', 'Created']} actions>
      {images.map((image) => (
        <ImageRow key={image.id} image={image} onDeleted={onDeleted} />
      ))}
    </Table>
  );
}

/** A row, and beneath it (the whole width) why a delete was refused: for K21 with the machines that use the image. */
function ImageRow({ image, onDeleted }: { image: Image; onDeleted(image: Image): void }) {
  const [users, setUsers] = useState<string[] | null>(null);
  const remove = useAction(async () => {
    setUsers(null);
    try {
      await deleteImage(image);
      onDeleted(image);
    } catch (error) {
      if (error instanceof ApiError && error.code === 'K21') setUsers(await machinesUsing(image).catch(() => null));
      throw error;
    }
  });
  return (
    <>
      <tr>
        <th scope="row">
          <Link href={imagePath(image.id)}>{image.name}</Link>
          {image.slug !== image.name && (
            <span class="hint">
              {' '}
              <code>{image.slug}</code>
            </span>
          )}
        </th>
        <td>
          <StatusBadge status={image.status} />
          <BuildState image={image} />
        </td>
        <td>
          {image.components.length}
          {image.build_strategy === 'derived_layer' && <span class="hint"> (with Debian packages)</span>}
        </td>
        <td>
          <Time iso={image.created_at} />
        </td>
        <td class="row-actions">
          <ConfirmButton
            label="Delete"
            {...deleteImageQuestion(image)}
            confirmLabel="Delete image"
            danger
            busy={remove.busy}
            onConfirm={() => void remove.run()}
          />
        </td>
      </tr>
      {remove.error && (
        <tr class="row-error">
          <td colSpan={5} aria-label={`Why ${image.name} was not deleted`}>
            <ErrorNotice error={remove.error} />
            {users && users.length > 0 && (
              <p class="hint">
                Used by{' '}
                {users.map((name, index) => (
                  <Fragment key={name}>
                    {index > 0 && ', '}
                    <Link href={machinePath(name)}>{name}</Link>
                  </Fragment>
                ))}
                .
              </p>
            )}
          </td>
        </tr>
      )}
    </>
  );
}

/** The machines made from this image (an instance records the id, slug or name it was created with). */
async function machinesUsing(image: Image): Promise<string[]> {
  const references = new Set([image.id, image.slug, image.name]);
  const instances = (await ok(api.GET('/v1/instances', { params: { query: { limit: 100 } } }))).data;
  return instances.filter((instance) => references.has(instance.image)).map((instance) => instance.name);
}
