import type { Handler } from '../src/http/handler';
import { SESSION_COOKIE } from '../src/http/cookies';

export const handler: Handler<'RevokeAllSessions'> = async ({ auth, services }) => {
  const revoked = await services.signIn.revokeAll(auth.accountId);
  // The spec: signing out everywhere closes SSH tunnels, terminals and open desktops too.
  services.sshTunnels.closeAccount(auth.accountId);
  services.terminals.closeAccount(auth.accountId);
  await services.desktops.closeAccount(auth.accountId);
  await services.serviceAccess.endForAccount(auth.accountId); // private services' cookies and tokens
  return {
    status: 200,
    body: {
      object: 'session_revocation',
      revoked,
      message: `Ended ${revoked} browser and CLI sign-in(s), including this one where it was one; API keys stay valid.`,
    },
    // The caller's own browser session ended too: clear its cookie, as logout does.
    cookies: auth.kind === 'browser' ? [{ name: SESSION_COOKIE, value: '', maxAgeSeconds: 0 }] : undefined,
  };
};
