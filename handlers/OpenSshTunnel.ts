import { KisteError } from '../src/errors';
import type { Handler } from '../src/http/handler';
import { carryTunnel } from '../src/http/websocket';

export const handler: Handler<'OpenSshTunnel'> = async ({ auth, services, params, request }) => {
  if (!request.upgrade) throw new KisteError('P08');
  const tunnel = await services.sshTunnels.connect(auth.accountId, params.name);
  request.upgrade.accept((ws) => carryTunnel(ws, tunnel));
  return { status: 101, body: undefined };
};
