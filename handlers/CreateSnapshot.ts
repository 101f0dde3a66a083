import type { Handler } from '../src/http/handler';
import { presentSnapshot } from './present-snapshot';

export const handler: Handler<'CreateSnapshot'> = async ({ auth, services, params, body }) => ({
  status: 200,
  body: presentSnapshot(await services.snapshots.take(auth.accountId, params.name, { name: body.name, memory: body.memory })),
});
