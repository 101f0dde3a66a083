import type { Handler } from '../src/http/handler';

export const handler: Handler<'EndDesktopSession'> = async ({ auth, services, params }) => {
  await services.desktops.endSession(auth.accountId, params.session);
  return { status: 204, body: undefined };
};
