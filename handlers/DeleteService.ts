import type { Handler } from '../src/http/handler';

export const handler: Handler<'DeleteService'> = async ({ auth, services, params }) => {
  const deleted = await services.hostedServices.delete(auth.accountId, params.name, params.service);
  return { status: 200, body: { id: deleted.id, object: 'hosted_service', deleted: true } };
};
