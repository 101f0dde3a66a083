import type { Handler } from '../src/http/handler';
import { presentWebhook } from './present-webhook';

export const handler: Handler<'UpdateWebhook'> = async ({ auth, services, params, body }) => ({
  status: 200,
  body: presentWebhook(await services.webhooks.update(auth.accountId, params.id, body)),
});
