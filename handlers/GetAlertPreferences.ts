import type { Handler } from '../src/http/handler';
import { presentAlertPreferences } from './present-alert';

export const handler: Handler<'GetAlertPreferences'> = async ({ auth, services }) => ({
  status: 200,
  body: presentAlertPreferences(await services.alerts.preferences(auth.accountId)),
});
