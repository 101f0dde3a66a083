import type { Handler } from '../src/http/handler';

export const handler: Handler<'DeleteSnapshot'> = async ({ auth, services, params }) => {
  const deleted = await services.snapshots.delete(auth.accountId, params.id);
  return { status: 200, body: { id: deleted.id, object: 'snapshot', deleted: true } };
};
