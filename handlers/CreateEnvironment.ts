import type { Handler } from '../src/http/handler';
import { presentEnvironment } from './present-environment';

export const handler: Handler<'CreateEnvironment'> = async ({ auth, services, body }) => {
  const { name, ...content } = body;
  return { status: 200, body: presentEnvironment(await services.environments.create(auth.accountId, name, content)) };
};
