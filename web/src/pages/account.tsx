// Account: who is signed in (GET /v1/me), the data export and account deletion. Once deletion is
// requested the page shows only its progress: the account is gone for the console.
import { useState } from 'preact/hooks';
import { api, ok, type Schemas } from '../api';
import { Link } from '../router';
import { Loaded, PageHeader, Time, useLoad } from '../ui/kit';
import { DeleteAccountForm, DeletionProgress } from './account/deletion';
import { AccountExport } from './account/export';

export function AccountPage() {
  const me = useLoad(() => ok(api.GET('/v1/me')), []);
  const [deletion, setDeletion] = useState<Schemas['AccountDeletion'] | null>(null);
  if (deletion) {
    return (
      <section>
        <PageHeader title="Account" />
        <DeletionProgress initial={deletion} />
      </section>
    );
  }
  return (
    <section>
      <PageHeader title="Account" />
      <Loaded load={me}>{(user) => <AccountDetails user={user} />}</Loaded>
      <AccountExport />
      <DeleteAccountForm onRequested={setDeletion} />
    </section>
  );
}

function AccountDetails({ user }: { user: Schemas['User'] }) {
  return (
    <section aria-labelledby="account-details" class="panel">
      <h2 id="account-details">Your account</h2>
      <dl class="fields">
        <dt>E-mail</dt>
        <dd>{user.email}</dd>
        <dt>Name</dt>
        <dd>{user.name ?? '—'}</dd>
        <dt>Member since</dt>
        <dd>
          <Time iso={user.created_at} />
        </dd>
        <dt>Account id</dt>
        <dd>
          <code>{user.id}</code>
        </dd>
        <dt>Password sign-in</dt>
        <dd>
          {user.sign_in_locked ? (
            <>
              Locked for browsers not seen before, after repeated failed attempts. Lift it with <code>kiste auth unlock</code>.
            </>
          ) : (
            'Open'
          )}
        </dd>
      </dl>
      <p class="hint">
        Where you are signed in: <Link href="/console/sign-ins">Sign-ins</Link>.
      </p>
    </section>
  );
}
