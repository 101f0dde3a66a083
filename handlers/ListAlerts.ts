import type { Handler } from '../src/http/handler';
import { presentAlert } from './present-alert';

export const handler: Handler<'ListAlerts'> = async ({ auth, services }) => ({
  status: 200,
  body: (await services.alerts.list(auth.accountId)).map(presentAlert),
});
