import type { Handler } from '../src/http/handler';
import { installPowerShellScript } from '../src/cli-installers';

export const handler: Handler<'GetInstallPowerShell'> = async ({ services }) => ({
  status: 200,
  body: installPowerShellScript(services.config.baseUrl),
  headers: { 'content-type': 'text/plain; charset=utf-8' },
});
