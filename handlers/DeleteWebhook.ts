import type { Handler } from '../src/http/handler';

export const handler: Handler<'DeleteWebhook'> = async ({ auth, services, params }) => {
  await services.webhooks.delete(auth.accountId, params.id);
  return { status: 200, body: { id: params.id, object: 'webhook_endpoint', deleted: true } };
};
