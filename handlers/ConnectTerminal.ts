import { KisteError } from '../src/errors';
import type { Handler } from '../src/http/handler';
import { carryTerminal } from '../src/http/websocket';

export const handler: Handler<'ConnectTerminal'> = async ({ services, query, request }) => {
  const session = services.terminals.byToken(query.token);
  if (!request.upgrade) throw new KisteError('P08');
  request.upgrade.accept((ws) => carryTerminal(ws, session));
  return { status: 101, body: undefined };
};
