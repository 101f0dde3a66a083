import type { Handler } from '../src/http/handler';
import { presentInstance } from './present-instance';

export const handler: Handler<'ForkInstance'> = async ({ auth, services, params, body }) => ({
  status: 200,
  body: presentInstance(
    await services.instances.fork(auth.accountId, params.name, { name: body.name, ttlSeconds: body.ttl_seconds ?? null, memory: body.memory ?? false }),
    services.instances.latestImageVersion(),
  ),
});
