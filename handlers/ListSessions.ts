import type { Handler } from '../src/http/handler';
import { paginate } from './list';
import { presentSignIn } from './present';

export const handler: Handler<'ListSessions'> = async ({ auth, services, query }) => {
  const current = auth.kind === 'api_key' ? null : auth.credentialId;
  const sessions = await services.signIn.list(auth.accountId);
  return { status: 200, body: paginate(sessions.map((session) => presentSignIn(session, current)), query) };
};
