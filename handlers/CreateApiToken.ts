import type { Handler } from '../src/http/handler';
import { presentApiToken } from './present';

export const handler: Handler<'CreateApiToken'> = async ({ auth, services, body }) => {
  const { token, record } = await services.apiTokens.create(auth.accountId, body.label, body.expires_in_seconds);
  return { status: 200, body: { token, data: presentApiToken(record) } };
};
