import { KisteError } from '../src/errors';
import type { Handler } from '../src/http/handler';
import { carryRecoveryConsole } from '../src/http/websocket';

export const handler: Handler<'OpenRecoveryConsole'> = async ({ services, params, query, request }) => {
  if (!request.upgrade) throw new KisteError('P08');
  const { session, rfb } = await services.desktops.openRecovery(params.session, query.token);
  request.upgrade.accept((ws) => carryRecoveryConsole(ws, rfb, (stream) => services.desktops.track(session, stream)));
  return { status: 101, body: undefined };
};
