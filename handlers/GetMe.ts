import type { Handler } from '../src/http/handler';
import { presentUser } from './present';

export const handler: Handler<'GetMe'> = async ({ auth }) => ({
  status: 200,
  body: presentUser(auth.account),
});
