// Who is signed in to the console. The session is the HttpOnly cookie; what the page keeps is the
// user and the CSRF token from GET /v1/auth/session, in memory only.
import { createContext, type ComponentChildren } from 'preact';
import { useContext, useEffect, useState } from 'preact/hooks';
import { api, ApiError, ok, onSignedOut, setCsrf, type Schemas } from './api';

export type SessionState =
  | { state: 'loading' }
  | { state: 'signed-out'; reason?: string }
  | { state: 'signed-in'; user: Schemas['User'] }
  | { state: 'failed'; error: ApiError };

interface SessionApi {
  session: SessionState;
  signedIn(answer: Schemas['ConsoleSession']): void;
  signOut(): Promise<void>;
}

const SessionContext = createContext<SessionApi | null>(null);

export function SessionProvider({ children }: { children: ComponentChildren }) {
  const [session, setSession] = useState<SessionState>({ state: 'loading' });

  const signedIn = (answer: Schemas['ConsoleSession']) => {
    setCsrf(answer.csrf ?? null);
    setSession(answer.user ? { state: 'signed-in', user: answer.user } : { state: 'signed-out' });
  };

  useEffect(() => {
    ok(api.GET('/v1/auth/session')).then(signedIn, (error: ApiError) => {
      setSession(error.status === 401 ? { state: 'signed-out' } : { state: 'failed', error });
    });
    return onSignedOut(() => {
      setCsrf(null);
      setSession({ state: 'signed-out', reason: 'Your sign-in ended (it expired or was revoked). Sign in again.' });
    });
  }, []);

  const signOut = async () => {
    await ok(api.POST('/v1/auth/logout')).catch(() => undefined);
    setCsrf(null);
    setSession({ state: 'signed-out' });
  };

  return <SessionContext.Provider value={{ session, signedIn, signOut }}>{children}</SessionContext.Provider>;
}

export function useSession(): SessionApi {
  const value = useContext(SessionContext);
  if (!value) throw new Error('useSession outside SessionProvider');
  return value;
}

/** The signed-in user; only for pages drawn inside the signed-in layout. */
export function useUser(): Schemas['User'] {
  const { session } = useSession();
  if (session.state !== 'signed-in') throw new Error('useUser while signed out');
  return session.user;
}
