// The data export: POST /v1/me/export makes a link valid ten minutes for this account only; the
// download is a plain GET that this browser's session cookie signs, so an ordinary link does it.
import { useState } from 'preact/hooks';
import { api, ok, type Schemas } from '../../api';
import { Button, ErrorNotice, Time, useAction } from '../../ui/kit';

/** The link's path and query on this origin: the console and the API share it, and with it the cookie. */
function sameOriginPath(url: string): string {
  const parsed = new URL(url, window.location.origin);
  return parsed.pathname + parsed.search;
}

export function AccountExport() {
  const [link, setLink] = useState<Schemas['AccountExportLink'] | null>(null);
  const create = useAction(async () => setLink(await ok(api.POST('/v1/me/export'))));
  const expired = link !== null && new Date(link.expires_at).getTime() <= Date.now();
  return (
    <section aria-labelledby="account-export" class="panel">
      <h2 id="account-export">Export your data</h2>
      <p>
        A JSON file with what kiste keeps about your account: your details, sign-ins, API keys (without their values) and device
        keys.
      </p>
      {link && !expired ? (
        <div class="notice success" role="status">
          <p>
            Your export is ready. The link expires <Time iso={link.expires_at} /> and works only while you are signed in to
            this account.
          </p>
          <p class="actions">
            <a class="button primary" href={sameOriginPath(link.url)} download="kiste-account-export.json">
              Download export
            </a>
          </p>
        </div>
      ) : (
        <Button busy={create.busy} onClick={() => void create.run()}>
          {expired ? 'Prepare a new export' : 'Prepare export'}
        </Button>
      )}
      <ErrorNotice error={create.error} />
    </section>
  );
}
