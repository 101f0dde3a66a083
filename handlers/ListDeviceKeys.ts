import type { Handler } from '../src/http/handler';
import { paginate } from './list';
import { presentDeviceKey } from './present';

export const handler: Handler<'ListDeviceKeys'> = async ({ auth, services, query }) => ({
  status: 200,
  body: paginate((await services.deviceKeys.list(auth.accountId)).map(presentDeviceKey), query),
});
