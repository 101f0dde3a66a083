import type { Handler } from '../src/http/handler';

export const handler: Handler<'OAuthToken'> = async ({ services, body, request }) => {
  const granted = await services.oauth.exchange(body, { userAgent: request.userAgent, ip: request.ip });
  return {
    status: 200,
    body: { access_token: granted.token, token_type: 'Bearer', expires_in: granted.expiresInSeconds, session_id: granted.sessionId },
    headers: { 'cache-control': 'no-store' },
  };
};
