import type { Handler } from '../src/http/handler';
import { BROWSER_COOKIE } from '../src/http/cookies';
import { consoleSignedIn } from './console-session';

export const handler: Handler<'Login'> = async ({ services, body, request }) => {
  const client = { userAgent: request.userAgent, ip: request.ip };
  const signIn = await services.signIn.passwordSignIn(body.email, body.password, request.cookies[BROWSER_COOKIE], client);
  return consoleSignedIn(services, signIn);
};
