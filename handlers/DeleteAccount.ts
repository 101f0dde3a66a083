import type { Handler } from '../src/http/handler';
import { SESSION_COOKIE } from '../src/http/cookies';
import { presentDeletion } from './present';

export const handler: Handler<'DeleteAccount'> = async ({ auth, services, body }) => {
  const deletion = await services.deletions.request(auth.accountId, body.confirm, body.password);
  return {
    status: 202,
    body: presentDeletion(deletion, 'Sign-in has ended; the account is being deleted in the background.'),
    cookies: auth.kind === 'browser' ? [{ name: SESSION_COOKIE, value: '', maxAgeSeconds: 0 }] : undefined,
  };
};
