import type { Handler } from '../src/http/handler';
import spec from '../src/generated/openapi.json';

export const handler: Handler<'GetOpenApiDocument'> = async () => ({
  status: 200,
  body: spec as Record<string, unknown>,
  headers: { 'cache-control': 'public, max-age=300' },
});
