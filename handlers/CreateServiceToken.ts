import type { Handler } from '../src/http/handler';

export const handler: Handler<'CreateServiceToken'> = async ({ auth, services, params }) => {
  const service = await services.hostedServices.owned(auth.accountId, params.name, params.service);
  const { token, expiresAt } = await services.serviceAccess.token(service);
  return {
    status: 200,
    body: { object: 'service_token', service_id: service.id, token, parameter: 'kiste_token', expires_at: expiresAt.toISOString() },
  };
};
