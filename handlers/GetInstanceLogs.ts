import type { Handler } from '../src/http/handler';

const DEFAULT_TAIL = 200;

export const handler: Handler<'GetInstanceLogs'> = async ({ auth, services, params, query }) => ({
  status: 200,
  body: { name: params.name, logs: await services.instances.logs(auth.accountId, params.name, query.tail ?? DEFAULT_TAIL) },
});
