// Where a private hosted service sends a browser without its cookie: signed in here (the console's
// sign-in comes first when needed), the browser is sent back to the service's own address with a
// one-time code, which the service's proxy trades for a cookie of that host. A service of another
// account is not shown to exist.
import { api, ok } from '../api';
import { Link } from '../router';
import { ErrorNotice, Loaded, PageHeader, useLoad } from '../ui/kit';

export function ServiceAuthorizePage({ query }: { query: URLSearchParams }) {
  const service = query.get('service') ?? '';
  const load = useLoad(async () => {
    const answer = await ok(api.POST('/v1/services/{service_id}/access', { params: { path: { service_id: service } }, body: { return: query.get('return') ?? '/' } }));
    window.location.assign(answer.redirect_to);
    return answer;
  }, [service]);
  return (
    <section class="card narrow">
      <PageHeader title="Opening a private service" />
      {load.error ? (
        <>
          <ErrorNotice error={load.error} title="This service cannot be opened from this account" />
          <p>
            It is private to the account that published it. <Link href="/">Go to your machines</Link>.
          </p>
        </>
      ) : (
        <Loaded load={load}>{() => <p>Taking you to the service…</p>}</Loaded>
      )}
    </section>
  );
}
