import type { Handler } from '../src/http/handler';
import { presentInstance } from './present-instance';

export const handler: Handler<'ResumeInstance'> = async ({ auth, services, params }) => {
  const { instance, finished } = await services.instances.resume(auth.accountId, params.name);
  return { status: finished ? 200 : 202, body: presentInstance(instance, services.instances.latestImageVersion()) };
};
