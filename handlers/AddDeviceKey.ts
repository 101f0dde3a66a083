import type { Handler } from '../src/http/handler';
import { presentDeviceKey } from './present';

export const handler: Handler<'AddDeviceKey'> = async ({ auth, services, body }) => ({
  status: 200,
  body: presentDeviceKey(await services.deviceKeys.add(auth.accountId, body.name, body.public_key)),
});
