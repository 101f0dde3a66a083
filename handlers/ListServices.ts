import type { Handler } from '../src/http/handler';
import { paginate } from './list';
import { presentService } from './present';

export const handler: Handler<'ListServices'> = async ({ auth, services, params, query }) => ({
  status: 200,
  body: paginate((await services.hostedServices.list(auth.accountId, params.name)).map(presentService), query),
});
