import type { Handler } from '../src/http/handler';
import { presentApiToken } from './present';

export const handler: Handler<'GetApiToken'> = async ({ auth, services, params }) => ({
  status: 200,
  body: presentApiToken(await services.apiTokens.get(auth.accountId, params.id)),
});
