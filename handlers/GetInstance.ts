import type { Handler } from '../src/http/handler';
import { presentInstance } from './present-instance';

export const handler: Handler<'GetInstance'> = async ({ auth, services, params }) => ({
  status: 200,
  body: presentInstance(await services.instances.get(auth.accountId, params.name), services.instances.latestImageVersion()),
});
