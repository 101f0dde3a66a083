import type { Handler } from '../src/http/handler';
import { presentImage } from './present-image';

export const handler: Handler<'CreateImage'> = async ({ auth, services, body }) => {
  const image = await services.images.create(auth.accountId, body.name, { from: body.from, components: body.components, resources: body.resources });
  return { status: 200, body: presentImage(image, await services.images.servedImage()) };
};
