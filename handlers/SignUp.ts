import type { Handler } from '../src/http/handler';
import { KisteError } from '../src/errors';
import { consoleSignedIn } from './console-session';

export const handler: Handler<'SignUp'> = async ({ services, body, request }) => {
  if (!services.config.openSignup) throw new KisteError('A07');
  const account = await services.accounts.create(body.email, body.password, body.name ?? null);
  const signIn = await services.signIn.startBrowserSession(account.id, undefined, { userAgent: request.userAgent, ip: request.ip });
  return consoleSignedIn(services, signIn);
};
