import type { Handler } from '../src/http/handler';
import { presentWebhook } from './present-webhook';

export const handler: Handler<'CreateWebhook'> = async ({ auth, services, body }) => {
  const { endpoint, secret } = await services.webhooks.create(auth.accountId, { name: body.name, url: body.url, events: body.events });
  return { status: 200, body: { secret, data: presentWebhook(endpoint) } };
};
