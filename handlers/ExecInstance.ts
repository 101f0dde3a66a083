import type { Handler } from '../src/http/handler';

export const handler: Handler<'ExecInstance'> = async ({ auth, services, params, body, request }) => ({
  status: 200,
  body: await services.commands.exec(
    auth.accountId,
    params.name,
    { argv: body.argv, cwd: body.cwd, env: body.env, id: body.id, timeoutMs: body.timeout_ms },
    request.signal,
  ),
});
