import type { Handler } from '../src/http/handler';
import { installShellScript } from '../src/cli-installers';

export const handler: Handler<'GetInstallScript'> = async ({ services }) => ({
  status: 200,
  body: installShellScript(services.config.baseUrl),
  headers: { 'content-type': 'text/x-shellscript; charset=utf-8' },
});
