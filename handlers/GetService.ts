import type { Handler } from '../src/http/handler';
import { presentService } from './present';

export const handler: Handler<'GetService'> = async ({ auth, services, params }) => ({
  status: 200,
  body: presentService(await services.hostedServices.get(auth.accountId, params.name, params.service)),
});
