import type { Handler } from '../src/http/handler';
import { presentService } from './present';

export const handler: Handler<'CreateService'> = async ({ auth, services, params, body }) => ({
  status: 200,
  body: presentService(await services.hostedServices.create(auth.accountId, params.name, {
    name: body.name,
    port: body.port,
    description: body.description,
    access: body.access,
    wakeOnRequest: body.wake_on_request,
    idleStopMinutes: body.idle_stop_minutes,
  })),
});
