import type { Handler } from '../src/http/handler';
import { presentCommand } from './present-command';

export const handler: Handler<'GetCommand'> = async ({ auth, services, params }) => {
  const instance = await services.instances.get(auth.accountId, params.name);
  return { status: 200, body: presentCommand(await services.commands.get(auth.accountId, instance.id, params.id), instance.name) };
};
