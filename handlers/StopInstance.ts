import type { Handler } from '../src/http/handler';
import { presentInstance } from './present-instance';

export const handler: Handler<'StopInstance'> = async ({ auth, services, params, body }) => {
  const { instance, finished } = await services.instances.stop(auth.accountId, params.name, body?.snapshot === true);
  return { status: finished ? 200 : 202, body: presentInstance(instance, services.instances.latestImageVersion()) };
};
