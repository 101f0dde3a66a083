import type { Handler } from '../src/http/handler';
import { presentDelivery } from './present-webhook';

export const handler: Handler<'ListWebhookDeliveries'> = async ({ auth, services, params }) => ({
  status: 200,
  body: (await services.webhooks.listDeliveries(auth.accountId, params.id)).map(presentDelivery),
});
