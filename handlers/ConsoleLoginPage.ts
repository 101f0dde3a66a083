import type { Handler } from '../src/http/handler';
import { loginPage, safeContinue } from '../web/console-pages';

export const handler: Handler<'ConsoleLoginPage'> = async ({ query }) => ({
  status: 200,
  body: loginPage(safeContinue(query.continue)),
  headers: { 'content-type': 'text/html; charset=utf-8' },
});
