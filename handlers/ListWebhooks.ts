import type { Handler } from '../src/http/handler';
import { presentWebhook } from './present-webhook';

export const handler: Handler<'ListWebhooks'> = async ({ auth, services }) => ({
  status: 200,
  body: (await services.webhooks.list(auth.accountId)).map(presentWebhook),
});
