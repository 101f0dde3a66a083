import type { Handler } from '../src/http/handler';

export const handler: Handler<'GetRuntimeImage'> = async ({ services }) => {
  const runtime = await services.images.runtime();
  return { status: 200, body: { object: 'runtime_image', image_version: runtime.version, released_at: runtime.releasedAt, release_notes: runtime.notes } };
};
