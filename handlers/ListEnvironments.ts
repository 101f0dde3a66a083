import type { Handler } from '../src/http/handler';
import { paginate } from './list';
import { presentEnvironment } from './present-environment';

export const handler: Handler<'ListEnvironments'> = async ({ auth, services, query }) => ({
  status: 200,
  body: paginate((await services.environments.list(auth.accountId)).map(presentEnvironment), query),
});
