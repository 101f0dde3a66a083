import type { Handler } from '../src/http/handler';

export const handler: Handler<'DesktopPreflight'> = async ({ auth, services, body }) => {
  await services.desktops.preflight(auth.accountId, body.machine);
  return { status: 204, body: undefined };
};
