import type { Handler } from '../src/http/handler';

export const handler: Handler<'DeleteDeviceKey'> = async ({ auth, services, params }) => {
  await services.deviceKeys.delete(auth.accountId, params.id);
  return { status: 200, body: { id: params.id, object: 'device_key', deleted: true } };
};
