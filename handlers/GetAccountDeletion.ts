import type { Handler } from '../src/http/handler';
import { KisteError } from '../src/errors';
import { presentDeletion } from './present';

export const handler: Handler<'GetAccountDeletion'> = async ({ auth, services }) => {
  const deletion = await services.deletions.get(auth.accountId);
  if (!deletion) throw new KisteError('A33');
  return { status: 200, body: presentDeletion(deletion) };
};
