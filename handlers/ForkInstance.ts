import type { Handler } from '../src/http/handler';
import { presentInstance } from './present-instance';

export const handler: Handler<'ForkInstance'> = async ({ auth, services, params, body }) => ({
  status: 200,
  body: presentInstance(
    await services.instances.fork(auth.accountId, params.name, body.name, body.ttl_seconds ?? null),
    services.instances.latestImageVersion(),
  ),
});
