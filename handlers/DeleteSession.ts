import type { Handler } from '../src/http/handler';

export const handler: Handler<'DeleteSession'> = async ({ auth, services, params }) => {
  await services.signIn.revoke(auth.accountId, params.id);
  await services.serviceAccess.endForSession(auth.accountId, params.id); // the private services it let in
  return { status: 200, body: { id: params.id, object: 'sign_in', deleted: true } };
};
