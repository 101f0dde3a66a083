// The CLI sign-in approval (`kiste login`): the OAuth request arrives in the query; Approve or Deny
// posts it back with the session's CSRF token and the browser follows the answer to the CLI's
// loopback callback.
import { api, ok } from '../api';
import { useUser } from '../session';
import { Button, ErrorNotice, PageHeader, useAction } from '../ui/kit';

export function ApprovePage({ query }: { query: URLSearchParams }) {
  const user = useUser();
  const request = Object.fromEntries(query);
  const decide = useAction(async (decision: 'approve' | 'deny') => {
    const answer = await ok(api.POST('/oauth/authorize', { body: { ...request, decision } }));
    window.location.assign(answer.redirect_to);
  });
  return (
    <section class="card narrow">
      <PageHeader title="Approve CLI sign-in" />
      <p>
        The kiste command line{request.device ? <> on <code>{request.device}</code></> : null} asks to act as <strong>{user.email}</strong>.
      </p>
      <p>
        Client <code>{request.client_id ?? ''}</code>, returning to <code>{request.redirect_uri ?? ''}</code>.
      </p>
      <p class="hint">Approve only if you just ran <code>kiste login</code> yourself.</p>
      <ErrorNotice error={decide.error} />
      <div class="actions">
        <Button variant="primary" busy={decide.busy} onClick={() => void decide.run('approve')}>
          Approve
        </Button>
        <Button busy={decide.busy} onClick={() => void decide.run('deny')}>
          Deny
        </Button>
      </div>
    </section>
  );
}
