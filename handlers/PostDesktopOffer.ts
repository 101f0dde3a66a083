import type { Handler } from '../src/http/handler';

export const handler: Handler<'PostDesktopOffer'> = async ({ auth, services, params, body }) => {
  const sdp = await services.desktops.offer(auth.accountId, params.session, body.sdp);
  return { status: 200, body: { type: 'answer', sdp } };
};
