import type { Handler } from '../src/http/handler';
import { presentInstance } from './present-instance';

export const handler: Handler<'ForkInstance'> = async ({ auth, services, params, body }) => {
  const source = await services.instances.get(auth.accountId, params.name);
  const copy = await services.instances.fork(auth.accountId, params.name, { name: body.name, ttlSeconds: body.ttl_seconds ?? null, memory: body.memory ?? false });
  // The copy publishes what its source published, under URLs of its own (openapi: HostedServiceResponse);
  // the copy exists by now, so a failure here leaves it without them rather than failing the fork.
  await services.hostedServices.copyToFork(source, copy).catch(() => undefined);
  return { status: 200, body: presentInstance(copy, services.instances.latestImageVersion()) };
};
