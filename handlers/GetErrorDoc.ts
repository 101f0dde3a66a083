import type { Handler } from '../src/http/handler';
import { ERRORS } from '../src/generated/errors';
import { errorDocPage } from '../web/console-pages';

export const handler: Handler<'GetErrorDoc'> = async ({ params }) => ({
  status: 200,
  body: errorDocPage(ERRORS[params.code]),
  headers: { 'content-type': 'text/html; charset=utf-8' },
});
