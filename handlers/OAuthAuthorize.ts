import type { Handler } from '../src/http/handler';
import { SESSION_COOKIE } from '../src/http/cookies';

/** Sends the browser on: to the console host first (308), then to approval or to sign-in. */
export const handler: Handler<'OAuthAuthorize'> = async ({ services, request }) => {
  const { baseUrl, consoleUrl } = services.config;
  const consoleHost = new URL(consoleUrl).hostname.toLowerCase();
  if (consoleHost !== new URL(baseUrl).hostname.toLowerCase() && request.host !== consoleHost) {
    return { status: 308, body: undefined, headers: { location: consoleUrl + request.url } };
  }
  const query = request.url.includes('?') ? request.url.slice(request.url.indexOf('?')) : '';
  const cookie = request.cookies[SESSION_COOKIE];
  const signedIn = cookie ? await services.credentials.authenticateBrowser(cookie).then(() => true, () => false) : false;
  const location = signedIn ? `/console/oauth/approve${query}` : `/console/login?continue=${encodeURIComponent(request.url)}`;
  return { status: 302, body: undefined, headers: { location } };
};
