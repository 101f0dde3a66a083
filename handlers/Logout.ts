import type { Handler } from '../src/http/handler';
import { SESSION_COOKIE } from '../src/http/cookies';

export const handler: Handler<'Logout'> = async ({ auth, services }) => {
  await services.accounts.logout(auth);
  if (auth.kind === 'browser') await services.serviceAccess.endForSession(auth.accountId, auth.credentialId); // the private services it let in
  const what = { browser: 'browser session', cli: 'CLI sign-in', api_key: 'API key' }[auth.kind];
  return {
    status: 200,
    body: { origin_revoked: true, authenticated: false, message: `This ${what} is revoked; open desktops and terminals stay open.` },
    cookies: auth.kind === 'browser' ? [{ name: SESSION_COOKIE, value: '', maxAgeSeconds: 0 }] : undefined,
  };
};
