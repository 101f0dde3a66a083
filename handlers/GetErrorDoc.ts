import type { Handler } from '../src/http/handler';
import { ERRORS } from '../src/generated/errors';
import { errorDocPage } from '../src/http/error-doc-page';

export const handler: Handler<'GetErrorDoc'> = async ({ params }) => ({
  status: 200,
  body: errorDocPage(ERRORS[params.code]),
  headers: { 'content-type': 'text/html; charset=utf-8' },
});
