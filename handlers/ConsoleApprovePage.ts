import type { Handler } from '../src/http/handler';
import { SESSION_COOKIE } from '../src/http/cookies';
import { approvePage } from '../web/console-pages';

export const handler: Handler<'ConsoleApprovePage'> = async ({ services, query, request }) => {
  const cookie = request.cookies[SESSION_COOKIE];
  const auth = cookie ? await services.credentials.authenticateBrowser(cookie).catch(() => null) : null;
  if (!auth) {
    return { status: 302, body: undefined, headers: { location: `/console/login?continue=${encodeURIComponent(request.url)}` } };
  }
  const account = await services.accounts.get(auth.accountId);
  const oauthRequest = Object.fromEntries(Object.entries(query).filter(([, value]) => typeof value === 'string')) as Record<string, string>;
  return {
    status: 200,
    body: approvePage(oauthRequest, services.credentials.csrfFor(auth.credentialId), account.email),
    headers: { 'content-type': 'text/html; charset=utf-8' },
  };
};
