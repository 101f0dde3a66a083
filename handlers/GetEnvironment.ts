import type { Handler } from '../src/http/handler';
import { presentEnvironmentDetail } from './present-environment';

export const handler: Handler<'GetEnvironment'> = async ({ auth, services, params }) => ({
  status: 200,
  body: presentEnvironmentDetail(await services.environments.get(auth.accountId, params.name)),
});
