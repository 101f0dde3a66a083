import type { Handler } from '../src/http/handler';
import { presentSnapshot } from './present-snapshot';

export const handler: Handler<'GetSnapshot'> = async ({ auth, services, params }) => ({
  status: 200,
  body: presentSnapshot(await services.snapshots.get(auth.accountId, params.id)),
});
