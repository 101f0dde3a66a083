import type { Handler } from '../src/http/handler';

export const handler: Handler<'GetConsoleAsset'> = async ({ services, params }) => {
  const asset = await services.builtFiles.consoleAsset(params.file);
  return {
    status: 200,
    body: asset.body,
    headers: { 'content-type': asset.contentType, 'cache-control': 'public, max-age=31536000, immutable', 'x-content-type-options': 'nosniff' },
  };
};
