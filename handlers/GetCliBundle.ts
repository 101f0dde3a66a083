import { cliBundle } from '../cli/build';
import type { Handler } from '../src/http/handler';

export const handler: Handler<'GetCliBundle'> = async () => ({
  status: 200,
  body: (await cliBundle()).toString('utf8'),
  headers: { 'content-type': 'application/javascript; charset=utf-8', 'cache-control': 'no-cache' },
});
