import type { Handler } from '../src/http/handler';

export const handler: Handler<'GetCliBundle'> = async ({ services }) => ({
  status: 200,
  body: (await services.builtFiles.cliBundle()).body,
  headers: { 'content-type': 'application/javascript; charset=utf-8', 'cache-control': 'no-cache' },
});
