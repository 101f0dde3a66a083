import type { Handler } from '../src/http/handler';
import { paginate } from './list';
import { presentImage, presentUniversalImage } from './present-image';

export const handler: Handler<'ListImages'> = async ({ auth, services, query }) => {
  const served = await services.images.servedImage();
  const own = await services.images.list(auth.accountId);
  return { status: 200, body: paginate([presentUniversalImage(served), ...own.map((image) => presentImage(image, served))], query) };
};
