import type { Handler } from '../src/http/handler';
import { presentDesktopSession } from './present-desktop';

export const handler: Handler<'CreateDesktopSession'> = async ({ auth, services, body }) => {
  const opened = await services.desktops.openSession(auth.accountId, auth.credentialId, body.machine);
  return { status: 200, body: presentDesktopSession(services, opened) };
};
