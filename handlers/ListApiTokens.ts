import type { Handler } from '../src/http/handler';
import { presentApiToken } from './present';

export const handler: Handler<'ListApiTokens'> = async ({ auth, services }) => ({
  status: 200,
  body: (await services.apiTokens.list(auth.accountId)).map(presentApiToken),
});
