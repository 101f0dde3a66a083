import type { Handler } from '../src/http/handler';
import { presentEnvironmentDetail } from './present-environment';

export const handler: Handler<'UpdateEnvironment'> = async ({ auth, services, params, body }) => ({
  status: 200,
  body: presentEnvironmentDetail(await services.environments.update(auth.accountId, params.name, body)),
});
