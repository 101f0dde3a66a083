// Account deletion: the account's e-mail address (typed as the confirmation) and the password. The
// request ends every sign-in at once, this one included, and the rest runs in the background; the page
// then shows how far it got and follows it (GET /v1/me/deletion) while the API still answers this
// browser, and the user goes on to a signed-out console.
import { useEffect, useState } from 'preact/hooks';
import { api, ok, type Schemas } from '../../api';
import { navigate } from '../../router';
import { useSession, useUser } from '../../session';
import { Button, ErrorNotice, Field, Time, useAction } from '../../ui/kit';

type Deletion = Schemas['AccountDeletion'];

const FOLLOW_EVERY_MS = 2_000;

export function DeleteAccountForm({ onRequested }: { onRequested(deletion: Deletion): void }) {
  const user = useUser();
  const [confirm, setConfirm] = useState('');
  const [password, setPassword] = useState('');
  const remove = useAction(async () => onRequested(await ok(api.DELETE('/v1/me', { body: { confirm: confirm.trim(), password } }))));
  return (
    <section aria-labelledby="delete-account" class="panel danger-zone">
      <h2 id="delete-account">Delete your account</h2>
      <p>
        This deletes your machines, snapshots, published ports, API keys, device keys, sign-ins and subscription. It cannot be
        undone. Every sign-in ends at once, this one included.
      </p>
      <form
        onSubmit={(event) => {
          event.preventDefault();
          void remove.run();
        }}
      >
        <Field label="Your account's e-mail address" id="delete-confirm" hint={<>Type <strong>{user.email}</strong> to confirm.</>}>
          <input id="delete-confirm" type="email" required autoComplete="off" aria-describedby="delete-confirm-hint" value={confirm} onInput={(e) => setConfirm(e.currentTarget.value)} />
        </Field>
        <Field label="Password" id="delete-password">
          <input id="delete-password" type="password" required autoComplete="current-password" value={password} onInput={(e) => setPassword(e.currentTarget.value)} />
        </Field>
        <ErrorNotice error={remove.error} />
        <Button type="submit" variant="danger" busy={remove.busy}>
          Delete account
        </Button>
      </form>
    </section>
  );
}

const STEPS: { step: Deletion['step']; label: string }[] = [
  { step: 'workers', label: 'Machines and their data' },
  { step: 'billing', label: 'Subscription' },
  { step: 'records', label: 'Account records' },
  { step: 'done', label: 'Done' },
];

/** Follows the deletion until it completes or the API no longer answers this (signed-out) browser. */
function useFollowDeletion(initial: Deletion): { deletion: Deletion; following: boolean } {
  const [deletion, setDeletion] = useState(initial);
  const [following, setFollowing] = useState(initial.state !== 'completed');
  useEffect(() => {
    if (!following) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const controller = new AbortController();
    // Not through ok(): its 401 would sign the console out before the user has read this page.
    const poll = async () => {
      const answer = await api.GET('/v1/me/deletion', { signal: controller.signal }).catch(() => null);
      if (controller.signal.aborted) return;
      if (answer?.data) {
        setDeletion(answer.data);
        if (answer.data.state === 'completed') return setFollowing(false);
      } else if (answer && [401, 403, 404].includes(answer.response.status)) {
        return setFollowing(false);
      }
      timer = setTimeout(() => void poll(), FOLLOW_EVERY_MS);
    };
    void poll();
    return () => {
      controller.abort();
      clearTimeout(timer);
    };
  }, [following]);
  return { deletion, following };
}

export function DeletionProgress({ initial }: { initial: Deletion }) {
  const { signOut } = useSession();
  const { deletion, following } = useFollowDeletion(initial);
  const reached = STEPS.findIndex((each) => each.step === deletion.step);
  return (
    <section aria-labelledby="deletion-progress" class="panel">
      <h2 id="deletion-progress">{deletion.state === 'completed' ? 'Your account is deleted' : 'Your account is being deleted'}</h2>
      {deletion.message && <p>{deletion.message}</p>}
      <ol class="steps" aria-label="Deletion steps">
        {STEPS.map((each, index) => (
          <li key={each.step} class={index < reached || deletion.state === 'completed' ? 'done' : index === reached ? 'current' : undefined} aria-current={index === reached && deletion.state !== 'completed' ? 'step' : undefined}>
            {each.label}
          </li>
        ))}
      </ol>
      <p class="hint" role="status">
        {deletion.state === 'completed' ? (
          <>
            Completed <Time iso={deletion.completed_at} />.
          </>
        ) : following ? (
          'Following the deletion…'
        ) : (
          'Your sign-in has ended, so the console cannot follow the deletion any further; it finishes in the background.'
        )}
      </p>
      {deletion.last_error && (
        <p class="notice warning">
          The last attempt failed ({deletion.last_error}); kiste tries again{deletion.next_attempt_at ? <> <Time iso={deletion.next_attempt_at} /></> : null}.
        </p>
      )}
      <Button variant="primary" onClick={() => void signOut().then(() => navigate('/console/login', { replace: true }))}>
        Continue to sign-in
      </Button>
    </section>
  );
}
