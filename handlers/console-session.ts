// The answer to a successful console sign-in (Login, SignUp): session body and both cookies.
import type { components } from '../src/generated/api';
import type { BrowserSignIn } from '../src/domain/sign-in';
import type { CookieToSet } from '../src/http/handler';
import { BROWSER_COOKIE, SESSION_COOKIE } from '../src/http/cookies';
import type { Services } from '../src/services';
import { presentUser } from './present';

const YEAR_SECONDS = 365 * 24 * 3600;

export async function consoleSignedIn(services: Services, signIn: BrowserSignIn): Promise<{
  status: 200;
  body: components['schemas']['ConsoleSession'];
  cookies: CookieToSet[];
}> {
  const account = await services.accounts.get(signIn.session.accountId);
  const maxAgeSeconds = Math.floor((signIn.session.expiresAt.getTime() - services.clock.now().getTime()) / 1000);
  return {
    status: 200,
    body: { authenticated: true, csrf: services.credentials.csrfFor(signIn.session.id), user: presentUser(account) },
    cookies: [
      { name: SESSION_COOKIE, value: signIn.sessionToken, maxAgeSeconds },
      { name: BROWSER_COOKIE, value: signIn.browserToken, maxAgeSeconds: YEAR_SECONDS },
    ],
  };
}
