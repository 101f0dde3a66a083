import type { Handler } from '../src/http/handler';

export const handler: Handler<'CreateDesktopLink'> = async ({ auth, services, params, body }) => {
  const { reference, link } = await services.desktops.createLink(auth.accountId, params.name, body?.ttl_seconds);
  // The reference rides in the fragment: browsers send it to no server (logs, Referer), only the viewer reads it.
  return { status: 200, body: { url: `${services.config.desktopUrl}/desktop#${reference}`, expires_at: link.expiresAt.toISOString() } };
};
