import type { Handler } from '../src/http/handler';

export const handler: Handler<'DeleteApiToken'> = async ({ auth, services, params }) => {
  await services.apiTokens.revoke(auth.accountId, params.id);
  return { status: 200, body: { id: params.id, object: 'api_token', deleted: true } };
};
