// "New image": components picked from the catalogue (one checkbox each, grouped by category) and
// any Debian packages (each `deb:<name>` at `latest`). Every change asks POST /v1/images/resolve for
// a preview — exact versions, the dependencies it adds, the recommended resources and how the image
// is made — and the form saves it with POST /v1/images.
import { useEffect, useState } from 'preact/hooks';
import { api, ok, type ApiError, type Schemas } from '../../api';
import { Link } from '../../router';
import { asApiError, Button, ErrorNotice, Field, Loading, useAction } from '../../ui/kit';
import { Table } from '../../ui/table';
import { categoriesOf } from './catalogue';
import { componentLabel, debianPackages, DEB_PREFIX, describeResources, describeStrategy, imagePath, type Component, type ComponentRef, type Image } from './data';

type Resolution = Schemas['ResolvedImageResponse'];
/** Typing settles before the preview is asked for. */
const PREVIEW_DELAY_MS = 300;

export function NewImageForm({ catalogue, onCreated }: { catalogue: Component[]; onCreated(image: Image): void }) {
  const [name, setName] = useState('');
  const [chosen, setChosen] = useState<string[]>([]);
  const [packages, setPackages] = useState('');
  const [created, setCreated] = useState<Image | null>(null);
  const refs = selection(catalogue, chosen, packages);
  const preview = useResolvePreview(refs);
  const create = useAction(async () => {
    // The image keeps the preview's recommended resources (machines made from it start with them), as `kiste images create` does.
    const resources = preview.key === JSON.stringify(refs) ? (preview.resolution?.recommended_resources ?? null) : null;
    const image = await ok(api.POST('/v1/images', { body: { name: name.trim(), components: refs, resources } }));
    setCreated(image);
    setName('');
    setChosen([]);
    setPackages('');
    onCreated(image);
  });

  return (
    <section aria-labelledby="new-image-heading" class="panel new-image">
      <h2 id="new-image-heading">New image</h2>
      <p class="hint">
        A private image is the universal image's components you choose, plus any Debian packages. One made only of the
        universal image's components is ready at once.
      </p>
      {created && (
        <p class="notice success" role="status">
          Image <Link href={imagePath(created.id)}>{created.name}</Link> saved: {created.status === 'ready' ? 'ready for new machines' : created.status}.
        </p>
      )}
      <form
        onSubmit={(event) => {
          event.preventDefault();
          void create.run();
        }}
      >
        <Field label="Image name" id="image-name" hint="Unique among your images; its slug (lowercase, dashes) must be too.">
          <input id="image-name" required maxLength={63} autoComplete="off" aria-describedby="image-name-hint" value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </Field>
        <ComponentPicker catalogue={catalogue} chosen={chosen} onChange={setChosen} />
        <Field
          label="Debian packages"
          id="image-packages"
          hint={
            <>
              Package names, separated by spaces or commas; each is added as <code>deb:&lt;name&gt;</code> at its latest version.
            </>
          }
        >
          <input id="image-packages" autoComplete="off" spellcheck={false} placeholder="ripgrep htop" aria-describedby="image-packages-hint" value={packages} onInput={(e) => setPackages(e.currentTarget.value)} />
        </Field>
        <ResolvePreview preview={preview} empty={refs.length === 0} />
        <ErrorNotice error={create.error} />
        <Button type="submit" variant="primary" busy={create.busy} disabled={refs.length === 0} aria-describedby={refs.length === 0 ? 'image-needs-components' : undefined}>
          Create image
        </Button>
        {refs.length === 0 && (
          <span class="hint inline" id="image-needs-components">
            Choose at least one component or package.
          </span>
        )}
      </form>
    </section>
  );
}

/** The request's components: the checked ones at their catalogue version, then the packages. */
function selection(catalogue: Component[], chosen: string[], packages: string): ComponentRef[] {
  const picked = catalogue.filter((component) => chosen.includes(component.id)).map((component) => ({ id: component.id, version: component.default_version }));
  return [...picked, ...debianPackages(packages).map((name) => ({ id: `${DEB_PREFIX}${name}`, version: 'latest' }))];
}

function ComponentPicker({ catalogue, chosen, onChange }: { catalogue: Component[]; chosen: string[]; onChange(ids: string[]): void }) {
  const selected = new Set(chosen);
  const toggle = (id: string, on: boolean) => onChange(catalogue.map((component) => component.id).filter((each) => (each === id ? on : selected.has(each))));
  return (
    <fieldset class="component-picker">
      <legend>Components</legend>
      <p class="hint">
        {chosen.length} of {catalogue.length} chosen; what they require is added for you.
      </p>
      <div class="event-groups">
        {categoriesOf(catalogue).map((category) => (
          <fieldset key={category} class="event-group">
            <legend>{category}</legend>
            {catalogue
              .filter((component) => component.category === category)
              .map((component) => (
                <label key={component.id} class="choice" for={`component-${component.id}`} title={`${component.id}: ${component.description}`}>
                  <input id={`component-${component.id}`} type="checkbox" checked={selected.has(component.id)} onChange={(e) => toggle(component.id, e.currentTarget.checked)} />
                  {component.name}
                </label>
              ))}
          </fieldset>
        ))}
      </div>
    </fieldset>
  );
}

interface Preview {
  /** The selection the resolution answers (JSON of its components). */
  key: string;
  resolution: Resolution | null;
  error: ApiError | null;
  busy: boolean;
}

/** Resolves the selection whenever it changes (debounced; a newer selection's answer wins). */
function useResolvePreview(refs: ComponentRef[]): Preview {
  const key = JSON.stringify(refs);
  const [preview, setPreview] = useState<Preview>({ key: '', resolution: null, error: null, busy: false });
  useEffect(() => {
    if (refs.length === 0) {
      setPreview({ key, resolution: null, error: null, busy: false });
      return;
    }
    const controller = new AbortController();
    setPreview((previous) => ({ ...previous, busy: true }));
    const timer = setTimeout(() => {
      ok(api.POST('/v1/images/resolve', { body: { components: refs }, signal: controller.signal })).then(
        (resolution) => setPreview({ key, resolution, error: null, busy: false }),
        (error: unknown) => !controller.signal.aborted && setPreview({ key, resolution: null, error: asApiError(error), busy: false }),
      );
    }, PREVIEW_DELAY_MS);
    return () => {
      clearTimeout(timer);
      controller.abort();
    };
  }, [key]);
  return preview;
}

function ResolvePreview({ preview, empty }: { preview: Preview; empty: boolean }) {
  if (empty) return null;
  const { resolution } = preview;
  return (
    <section aria-labelledby="resolve-heading" class="resolve-preview" aria-busy={preview.busy ? 'true' : undefined}>
      <h3 id="resolve-heading">Preview</h3>
      {preview.error && <ErrorNotice error={preview.error} title="This selection does not resolve." />}
      {!resolution && !preview.error && <Loading label="Resolving…" />}
      {resolution && (
        <>
          <dl class="fields">
            <dt>Build</dt>
            <dd>
              {describeStrategy(resolution.image.build_strategy)}
              <span class="hint inline">{resolution.image.build_strategy === 'universal' ? 'ready at once' : 'built in a builder machine first: minutes'}</span>
            </dd>
            <dt>Recommended</dt>
            <dd>
              {describeResources(resolution.recommended_resources)}
              <span class="hint inline">saved with the image: the shape of machines made from it</span>
            </dd>
            <dt>Added dependencies</dt>
            <dd>
              {resolution.added_dependencies.length === 0 ? (
                'none'
              ) : (
                <ul class="code-list">
                  {resolution.added_dependencies.map((id) => (
                    <li key={id}>
                      <code>{id}</code>
                    </li>
                  ))}
                </ul>
              )}
            </dd>
          </dl>
          <Table label="Resolved components" class="resolved" columns={['Component', 'Exact version', 'Why']}>
            {resolution.components.map((component) => (
              <tr key={component.id}>
                <th scope="row">
                  <code title={componentLabel(component)}>{component.id}</code>
                </th>
                <td>
                  <code>{component.version}</code>
                </td>
                <td>{component.requested ? 'chosen' : <span class="badge subtle">dependency</span>}</td>
              </tr>
            ))}
          </Table>
        </>
      )}
    </section>
  );
}
