import type { Handler } from '../src/http/handler';
import { presentImage, presentUniversalImage } from './present-image';

export const handler: Handler<'GetImage'> = async ({ auth, services, params }) => {
  const image = await services.images.get(auth.accountId, params.id);
  const served = await services.images.servedImage();
  return { status: 200, body: image ? presentImage(image, served) : presentUniversalImage(served) };
};
