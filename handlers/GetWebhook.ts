import type { Handler } from '../src/http/handler';
import { presentWebhook } from './present-webhook';

export const handler: Handler<'GetWebhook'> = async ({ auth, services, params }) => ({
  status: 200,
  body: presentWebhook(await services.webhooks.get(auth.accountId, params.id)),
});
