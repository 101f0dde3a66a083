import type { Handler } from '../src/http/handler';

export const handler: Handler<'DeleteImage'> = async ({ auth, services, params }) => {
  const image = await services.images.delete(auth.accountId, params.id);
  return { status: 200, body: { id: image.id, object: 'image', deleted: true } };
};
