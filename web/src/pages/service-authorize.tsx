// Where a private hosted service sends a browser without its cookie: signed in here (the console's
// sign-in comes first when needed), the browser is sent back to the service's own address with a
// one-time code, which the service's proxy trades for a cookie of that host. It goes on by itself
// only with the proxy's signed `state`; a link from anywhere else asks the person first. A service of
// another account is not shown to exist.
import { useEffect } from 'preact/hooks';
import { api, ok } from '../api';
import { Link } from '../router';
import { Button, ErrorNotice, PageHeader, useAction } from '../ui/kit';

export function ServiceAuthorizePage({ query }: { query: URLSearchParams }) {
  const service = query.get('service') ?? '';
  const returnTo = query.get('return') ?? '/';
  const state = query.get('state') ?? undefined;
  const open = useAction(async (withState: boolean) => {
    const answer = await ok(api.POST('/v1/services/{service_id}/access', { params: { path: { service_id: service } }, body: { return: returnTo, ...(withState && state ? { state } : {}) } }));
    window.location.assign(answer.redirect_to);
  });
  useEffect(() => {
    if (state) void open.run(true);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [service, state]);
  return (
    <section class="card narrow">
      <PageHeader title="Opening a private service" />
      {open.error ? (
        <>
          <ErrorNotice error={open.error} title="This service cannot be opened from this account" />
          <p>
            It is private to the account that published it. <Link href="/">Go to your machines</Link>.
          </p>
        </>
      ) : state ? (
        <p>Taking you to the service…</p>
      ) : (
        <>
          <p>
            A link asks to open one of your private services at <code>{returnTo}</code>. Open it only if you meant to.
          </p>
          <div class="actions">
            <Button variant="primary" busy={open.busy} onClick={() => void open.run(false)}>
              Open the service
            </Button>
          </div>
        </>
      )}
    </section>
  );
}
