import type { Handler } from '../src/http/handler';
import { presentService } from './present';

export const handler: Handler<'UpdateService'> = async ({ auth, services, params, body }) => ({
  status: 200,
  body: presentService(await services.hostedServices.update(auth.accountId, params.name, params.service, {
    access: body.access,
    description: body.description,
    wakeOnRequest: body.wake_on_request,
    idleStopMinutes: body.idle_stop_minutes,
  })),
});
