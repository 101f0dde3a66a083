import type { Handler } from '../src/http/handler';
import { presentResolution } from './present-image';

export const handler: Handler<'ResolveImage'> = async ({ auth, services, body }) => ({
  status: 200,
  body: presentResolution(await services.images.resolve(auth.accountId, { from: body.from, components: body.components, resources: body.resources })),
});
