import type { Handler } from '../src/http/handler';

export const handler: Handler<'GetImageBuildLog'> = async ({ auth, services, params }) => {
  const image = await services.images.get(auth.accountId, params.id);
  return {
    status: 200,
    body: { object: 'image_build_log', image_id: image?.id ?? 'universal', log: image?.buildLog ?? '', truncated: image?.buildLogTruncated ?? false },
  };
};
