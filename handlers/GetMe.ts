import type { Handler } from '../src/http/handler';
import { presentUser } from './present';

export const handler: Handler<'GetMe'> = async ({ auth, services }) => ({
  status: 200,
  body: presentUser(await services.accounts.get(auth.accountId)),
});
