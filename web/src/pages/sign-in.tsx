// Password sign-in (and sign-up when the operator opened it). A lock after repeated failures is
// explained with what lifts it; afterwards the browser goes on to where it was headed (same origin only).
import { useEffect, useState } from 'preact/hooks';
import { api, ok, type Schemas } from '../api';
import { Link, useLocation } from '../router';
import { useSession } from '../session';
import { Button, ErrorNotice, Field, useAction } from '../ui/kit';

function useOpenSignup(): boolean {
  const [open, setOpen] = useState(false);
  useEffect(() => {
    ok(api.GET('/status.json')).then((status) => setOpen(status.open_signup), () => setOpen(false));
  }, []);
  return open;
}

function Lockout() {
  return (
    <div class="notice warning" role="note">
      <strong>Password sign-in is locked for this account.</strong>
      <p>
        After repeated failed attempts kiste stops accepting the password from browsers it has not seen before, so that
        nobody can keep guessing. A browser you signed in with before still works.
      </p>
      <p>
        To lift the lock, use a signed-in CLI (<code>kiste auth unlock</code>) or an API key (
        <code>POST /v1/auth/unlock</code>). Then sign in here again.
      </p>
    </div>
  );
}

export function SignInPage({ reason }: { reason?: string }) {
  const { signedIn } = useSession();
  const { query } = useLocation();
  const openSignup = useOpenSignup();
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const submit = useAction(async () => {
    const answer: Schemas['ConsoleSession'] = await ok(api.POST('/v1/auth/login', { body: { email, password } }));
    signedIn(answer); // the app then goes on to ?continue (app.tsx)
  });
  useEffect(() => {
    document.title = 'Sign in · kiste';
  }, []);
  return (
    <section class="card">
      <h1>Sign in to kiste</h1>
      {reason && !submit.error && <p class="notice info" role="status">{reason}</p>}
      <form
        onSubmit={(event) => {
          event.preventDefault();
          void submit.run();
        }}
      >
        <Field label="E-mail" id="email">
          <input id="email" name="email" type="email" autoComplete="username" required value={email} onInput={(e) => setEmail(e.currentTarget.value)} />
        </Field>
        <Field label="Password" id="password">
          <input id="password" name="password" type="password" autoComplete="current-password" required value={password} onInput={(e) => setPassword(e.currentTarget.value)} />
        </Field>
        <ErrorNotice error={submit.error} />
        {submit.error?.code === 'A06' && <Lockout />}
        <Button type="submit" variant="primary" busy={submit.busy}>
          Sign in
        </Button>
      </form>
      {openSignup && (
        <p class="aside">
          No account yet? <Link href={`/console/signup${query.size ? `?${query}` : ''}`}>Create an account</Link>
        </p>
      )}
    </section>
  );
}

export function SignUpPage() {
  const { signedIn } = useSession();
  const { query } = useLocation();
  const [email, setEmail] = useState('');
  const [name, setName] = useState('');
  const [password, setPassword] = useState('');
  const submit = useAction(async () => {
    const answer: Schemas['ConsoleSession'] = await ok(api.POST('/v1/auth/signup', { body: { email, password, name: name || null } }));
    signedIn(answer); // the app then goes on to ?continue (app.tsx)
  });
  useEffect(() => {
    document.title = 'Create an account · kiste';
  }, []);
  return (
    <section class="card">
      <h1>Create a kiste account</h1>
      <form
        onSubmit={(event) => {
          event.preventDefault();
          void submit.run();
        }}
      >
        <Field label="E-mail" id="email">
          <input id="email" type="email" autoComplete="username" required maxLength={254} value={email} onInput={(e) => setEmail(e.currentTarget.value)} />
        </Field>
        <Field label="Name (optional)" id="name">
          <input id="name" autoComplete="name" maxLength={100} value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </Field>
        <Field label="Password" id="password" hint="At least 10 characters.">
          <input id="password" type="password" autoComplete="new-password" required minLength={10} maxLength={1024} aria-describedby="password-hint" value={password} onInput={(e) => setPassword(e.currentTarget.value)} />
        </Field>
        <ErrorNotice error={submit.error} />
        <Button type="submit" variant="primary" busy={submit.busy}>
          Create account
        </Button>
      </form>
      <p class="aside">
        Have an account? <Link href={`/console/login${query.size ? `?${query}` : ''}`}>Sign in</Link>
      </p>
    </section>
  );
}
