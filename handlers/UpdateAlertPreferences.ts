import type { Handler } from '../src/http/handler';
import { presentAlertPreferences } from './present-alert';

export const handler: Handler<'UpdateAlertPreferences'> = async ({ auth, services, body }) => ({
  status: 200,
  body: presentAlertPreferences(await services.alerts.updatePreferences(auth.accountId, body)),
});
