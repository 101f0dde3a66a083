import type { Handler } from '../src/http/handler';

export const handler: Handler<'AuthorizeServiceAccess'> = async ({ auth, services, params, body }) => ({
  status: 200,
  body: { object: 'service_redirect', redirect_to: await services.serviceAccess.authorize(auth, params.service_id, body.return, body.state) },
});
