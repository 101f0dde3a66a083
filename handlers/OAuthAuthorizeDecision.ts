import type { Handler } from '../src/http/handler';

export const handler: Handler<'OAuthAuthorizeDecision'> = async ({ auth, services, body }) => {
  const approve = body.decision !== 'deny';
  const redirectTo = await services.oauth.decide(auth.accountId, body, approve);
  return { status: 200, body: { object: 'oauth_redirect', redirect_to: redirectTo } };
};
