// Sign-ins: the account's browser and CLI sign-ins (API keys are on their own page). The one making
// this request is marked; any other can be revoked, and "Sign out everywhere" ends them all, this
// one included, so the console signs out afterwards.
import { api, ok, type Schemas } from '../api';
import { navigate } from '../router';
import { useSession } from '../session';
import { useRefreshOn } from '../ui/live';
import { ConfirmAction } from '../ui/confirm-action';
import { PageHeader, Time } from '../ui/kit';
import { ListView, usePagedList } from '../ui/paged-list';
import { Table } from '../ui/table';
import { describeUserAgent } from './account/user-agent';

type SignIn = Schemas['SignIn'];

export function SignInsPage() {
  const signIns = usePagedList((startingAfter) => ok(api.GET('/v1/sessions', { params: { query: { starting_after: startingAfter } } })), []);
  useRefreshOn('session', signIns.reload);
  return (
    <section>
      <PageHeader title="Sign-ins">
        <SignOutEverywhere />
      </PageHeader>
      <p class="lead">Browsers and command lines signed in to your account. Revoke any you do not recognise.</p>
      <ListView list={signIns} empty="No sign-ins.">
        {(items) => (
          <Table columns={['Sign-in', 'Kind', 'Address', 'Signed in', 'Last used', 'Expires']} actions>
            {items.map((signIn) => (
              <SignInRow key={signIn.id} signIn={signIn} onRevoked={() => signIns.update((rows) => rows.filter((row) => row.id !== signIn.id))} />
            ))}
          </Table>
        )}
      </ListView>
    </section>
  );
}

function signInName(signIn: SignIn): string {
  if (signIn.kind === 'cli') return signIn.device ? `kiste CLI on ${signIn.device}` : 'kiste CLI';
  return describeUserAgent(signIn.user_agent);
}

function SignInRow({ signIn, onRevoked }: { signIn: SignIn; onRevoked(): void }) {
  const name = signInName(signIn);
  return (
    <tr class={signIn.current ? 'current' : undefined}>
      <th scope="row">
        <span title={signIn.user_agent ?? undefined}>{name}</span>
        {signIn.current && <span class="badge status-current">This browser</span>}
      </th>
      <td>{signIn.kind === 'cli' ? 'CLI' : 'Browser'}</td>
      <td>{signIn.ip ? <code>{signIn.ip}</code> : '—'}</td>
      <td>
        <Time iso={signIn.created_at} />
      </td>
      <td>
        <Time iso={signIn.last_used_at} empty="never" />
      </td>
      <td>
        <Time iso={signIn.expires_at} />
      </td>
      <td class="row-actions">
        {signIn.current ? (
          <span class="hint">End it with Sign out</span>
        ) : (
          <ConfirmAction
            label="Revoke"
            question={`Revoke the sign-in “${name}”?`}
            detail={signIn.kind === 'cli' ? 'That command line has to run kiste login again.' : 'That browser has to sign in again.'}
            confirmLabel="Revoke sign-in"
            danger
            action={async () => {
              await ok(api.DELETE('/v1/sessions/{id}', { params: { path: { id: signIn.id } } }));
              onRevoked();
            }}
          />
        )}
      </td>
    </tr>
  );
}

function SignOutEverywhere() {
  const { signOut } = useSession();
  return (
    <ConfirmAction
      label="Sign out everywhere"
      question="Sign out everywhere?"
      detail="Every browser and command line signed in to your account is signed out, this one included, and open desktops and terminals close. API keys keep working."
      confirmLabel="End all sign-ins"
      danger
      action={async () => {
        await ok(api.POST('/v1/sessions/revoke-all'));
        // This sign-in ended with the others: the console is signed out now.
        await signOut();
        navigate('/console/login', { replace: true });
      }}
    />
  );
}
