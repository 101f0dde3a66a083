import type { Handler } from '../src/http/handler';
import { paginate } from './list';
import { presentCommand } from './present-command';

export const handler: Handler<'ListCommands'> = async ({ auth, services, params, query }) => {
  const instance = await services.instances.get(auth.accountId, params.name);
  const commands = await services.commands.list(auth.accountId, instance.id);
  return { status: 200, body: paginate(commands.map((command) => presentCommand(command, instance.name)), query) };
};
