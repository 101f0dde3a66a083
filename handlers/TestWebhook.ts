import type { Handler } from '../src/http/handler';
import { presentDelivery } from './present-webhook';

export const handler: Handler<'TestWebhook'> = async ({ auth, services, params }) => ({
  status: 200,
  body: presentDelivery(await services.webhooks.test(auth.accountId, params.id)),
});
