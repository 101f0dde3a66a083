import type { Handler } from '../src/http/handler';
import { presentAlert } from './present-alert';

export const handler: Handler<'AcknowledgeAlert'> = async ({ auth, services, params }) => ({
  status: 200,
  body: presentAlert(await services.alerts.acknowledge(auth.accountId, params.id)),
});
