import type { Handler } from '../src/http/handler';
import { paginate } from './list';
import { presentInstance } from './present-instance';

export const handler: Handler<'ListInstances'> = async ({ auth, services, query }) => {
  const latest = services.instances.latestImageVersion();
  const instances = await services.instances.list(auth.accountId);
  return { status: 200, body: paginate(instances.map((instance) => presentInstance(instance, latest)), query) };
};
