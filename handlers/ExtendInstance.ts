import type { Handler } from '../src/http/handler';
import { presentInstance } from './present-instance';

export const handler: Handler<'ExtendInstance'> = async ({ auth, services, params, body }) => ({
  status: 200,
  body: presentInstance(await services.instances.extend(auth.accountId, params.name, body.ttl_seconds), services.instances.latestImageVersion()),
});
