import type { Handler } from '../src/http/handler';
import { presentDesktopSession } from './present-desktop';

export const handler: Handler<'RenewDesktopSession'> = async ({ auth, services, body }) => {
  const opened = await services.desktops.renewSession(auth.accountId, auth.credentialId, body.machine);
  return { status: 200, body: presentDesktopSession(services, opened) };
};
