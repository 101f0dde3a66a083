import type { Handler } from '../src/http/handler';
import { paginate } from './list';
import { presentComponent } from './present-image';

export const handler: Handler<'ListImageComponents'> = async ({ services, query }) => ({
  status: 200,
  body: paginate((await services.images.catalogue()).map(presentComponent), query),
});
