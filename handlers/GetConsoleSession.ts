import type { Handler } from '../src/http/handler';
import { presentUser } from './present';

export const handler: Handler<'GetConsoleSession'> = async ({ auth, services }) => ({
  status: 200,
  body: {
    authenticated: true,
    csrf: services.credentials.csrfFor(auth.credentialId),
    user: presentUser(await services.accounts.get(auth.accountId)),
  },
});
