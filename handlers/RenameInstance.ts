import type { Handler } from '../src/http/handler';
import { presentInstance } from './present-instance';

export const handler: Handler<'RenameInstance'> = async ({ auth, services, params, body }) => ({
  status: 200,
  body: presentInstance(await services.instances.rename(auth.accountId, params.name, body.name), services.instances.latestImageVersion()),
});
