import type { Handler } from '../src/http/handler';
import { KisteError } from '../src/errors';

export const handler: Handler<'OAuthAuthorizeDecision'> = async ({ auth, services, body }) => {
  // Only an explicit "approve" issues a code; anything but approve or deny is refused.
  if (body.decision !== 'approve' && body.decision !== 'deny') {
    throw new KisteError('A20', { message: 'decision must be "approve" or "deny"', param: 'decision' });
  }
  const redirectTo = await services.oauth.decide(auth.accountId, body, body.decision === 'approve');
  return { status: 200, body: { object: 'oauth_redirect', redirect_to: redirectTo } };
};
