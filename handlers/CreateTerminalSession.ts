import type { Handler } from '../src/http/handler';

export const handler: Handler<'CreateTerminalSession'> = async ({ auth, services, params, body }) => {
  const { session, token } = await services.terminals.create(auth.accountId, params.name, { cols: body?.cols, rows: body?.rows });
  const connectUrl = new URL('/v1/terminal/connect', services.config.baseUrl.replace(/^http/, 'ws'));
  connectUrl.searchParams.set('token', token);
  return {
    status: 200,
    body: {
      object: 'terminal_session', id: session.id, instance: session.instanceName, connect_url: connectUrl.toString(),
      token, expires_at: session.expiresAt.toISOString(), cols: session.cols, rows: session.rows,
    },
  };
};
