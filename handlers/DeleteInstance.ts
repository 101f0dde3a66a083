import type { Handler } from '../src/http/handler';

export const handler: Handler<'DeleteInstance'> = async ({ auth, services, params }) => {
  const { finished } = await services.instances.delete(auth.accountId, params.name);
  return finished
    ? { status: 200, body: { object: 'message', message: `Instance ${params.name} is deleted; its named snapshots stay.`, name: params.name } }
    : { status: 202, body: { object: 'message', message: `Instance ${params.name} is being deleted; instance.deleted marks the end.`, name: params.name } };
};
