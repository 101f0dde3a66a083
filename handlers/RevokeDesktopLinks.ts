import type { Handler } from '../src/http/handler';

export const handler: Handler<'RevokeDesktopLinks'> = async ({ auth, services, params }) => {
  const revoked = await services.desktops.revokeLinks(auth.accountId, params.name);
  return { status: 200, body: { object: 'desktop_link_revocation', revoked } };
};
