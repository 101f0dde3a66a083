import type { Handler } from '../src/http/handler';
import { presentCommand } from './present-command';

export const handler: Handler<'InterruptCommand'> = async ({ auth, services, params }) => {
  const instance = await services.instances.get(auth.accountId, params.name);
  const { accepted, command } = await services.commands.interrupt(auth.accountId, instance.id, params.id);
  return { status: 200, body: { accepted, command: presentCommand(command, instance.name) } };
};
