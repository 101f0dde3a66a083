import type { Handler } from '../src/http/handler';

export const handler: Handler<'Healthz'> = async () => ({
  status: 200,
  body: { status: 'ok', service: 'kiste', region: null },
});
