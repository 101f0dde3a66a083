// The built-in image: the version this server serves now (GET /v1/runtime/image), what it is made of
// and its release notes against the version before, breaking changes marked.
import { api, ok } from '../../api';
import { Link } from '../../router';
import { Loaded, Time, useLoad } from '../../ui/kit';
import { describeOs, imagePath, UNIVERSAL, type Image } from './data';

const BREAKING = /^BREAKING:\s*/;

export function BuiltinImage({ image }: { image: Image | undefined }) {
  const runtime = useLoad(() => ok(api.GET('/v1/runtime/image')), []);
  return (
    <section aria-labelledby="builtin-heading" class="panel builtin-image">
      <h2 id="builtin-heading">Built-in image</h2>
      <Loaded load={runtime}>
        {(served) => (
          <>
            <dl class="fields">
              <dt>Name</dt>
              <dd>
                <Link href={imagePath(UNIVERSAL)}>Universal</Link> <span class="hint inline">(id <code>{UNIVERSAL}</code>; machines use it unless you choose another)</span>
              </dd>
              <dt>Served version</dt>
              <dd>
                <code>{served.image_version}</code>
              </dd>
              <dt>Released</dt>
              <dd>
                <Time iso={served.released_at} />
              </dd>
              {image && (
                <>
                  <dt>System</dt>
                  <dd>{describeOs(image.os)}</dd>
                  <dt>Components</dt>
                  <dd>{image.components.length}</dd>
                </>
              )}
            </dl>
            <ReleaseNotes notes={served.release_notes} />
          </>
        )}
      </Loaded>
    </section>
  );
}

function ReleaseNotes({ notes }: { notes: string[] }) {
  const breaking = notes.filter((line) => BREAKING.test(line)).length;
  return (
    <>
      <h3 id="release-notes-heading">
        Release notes
        {breaking > 0 && <span class="badge status-failed">{breaking} breaking</span>}
      </h3>
      {notes.length === 0 ? (
        <p class="hint">No changes from the previous version.</p>
      ) : (
        <ul class="release-notes" aria-labelledby="release-notes-heading">
          {notes.map((line, index) =>
            BREAKING.test(line) ? (
              <li key={index} class="breaking">
                <strong>Breaking:</strong> {line.replace(BREAKING, '')}
              </li>
            ) : (
              <li key={index}>{line}</li>
            ),
          )}
        </ul>
      )}
    </>
  );
}
