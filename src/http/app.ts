// The Express 5 app. openapi-backend matches each request to an operation of openapi.yaml
// (and answers unknown routes and wrong methods); runOperation does the rest.
import express, { NextFunction, Request, Response } from 'express';
import OpenAPIBackend, { Context } from 'openapi-backend';
import pinoHttp from 'pino-http';
import type { Logger } from 'pino';
import spec from '../generated/openapi.json';
import { OPERATIONS } from '../generated/operations';
import { errorEnvelope, KisteError, retryAfterOf } from '../errors';
import type { Services } from '../services';
import { runOperation } from './pipeline';
import { requestIdOf } from './request-id';
import { allowedMethods } from './routes';

export async function createApp(services: Services, logger: Logger): Promise<express.Express> {
  const api = new OpenAPIBackend({ definition: spec as any, validate: false, quick: true, strict: false });
  for (const operationId of Object.keys(OPERATIONS)) {
    api.register(operationId, (context: Context, req: Request, res: Response) =>
      runOperation(services, { operationId, pathParams: (context.request.params ?? {}) as Record<string, string> }, req, res),
    );
  }
  api.register('notFound', (context: Context) => {
    throw new KisteError('P05', { message: `No route for ${context.request.method.toUpperCase()} ${context.request.path}` });
  });
  api.register('methodNotAllowed', (context: Context) => {
    const allowed = allowedMethods(context.request.path);
    throw new KisteError('P06', {
      message: `${context.request.method.toUpperCase()} is not allowed on ${context.request.path}`,
      headers: { allow: allowed.join(', ') },
    });
  });
  // Authentication is the pipeline's (x-kiste-credentials decides per operation, see pipeline.ts);
  // openapi-backend only routes, so its security step is told to let every request through to us.
  api.registerSecurityHandler('bearerAuth', () => true);
  api.registerSecurityHandler('sessionCookie', () => true);
  await api.init();

  const app = express();
  app.disable('x-powered-by');
  app.set('query parser', 'simple');
  app.use((req: Request, res: Response, next: NextFunction) => {
    const id = requestIdOf(req);
    (req as Request & { id: string }).id = id;
    res.setHeader('x-request-id', id);
    next();
  });
  app.use(
    pinoHttp({
      logger,
      genReqId: (req) => (req as Request & { id: string }).id,
      quietReqLogger: true,
      // Credentials never reach the log: no auth or cookie headers, no query strings (export tokens).
      serializers: {
        req: (req) => ({ id: req.id, method: req.method, path: String(req.url).split('?')[0], remoteAddress: req.remoteAddress }),
        res: (res) => ({ statusCode: res.statusCode }),
      },
    }),
  );
  app.use(async (req: Request, res: Response) => {
    // The router decodes path parameters with decodeURIComponent; broken %-escapes are the client's error.
    if (!isDecodable(req.path)) throw new KisteError('P01', { message: 'The request path has a malformed %-escape' });
    await api.handleRequest({ method: req.method, path: req.path, query: req.query as any, headers: req.headers as any }, req, res);
  });
  app.use((error: unknown, req: Request, res: Response, _next: NextFunction) => {
    sendError(services, error, req, res);
  });
  return app;
}

export function sendError(services: Services, error: unknown, req: Request, res: Response): void {
  const requestId = (req as Request & { id?: string }).id ?? null;
  let known: KisteError;
  if (error instanceof KisteError) {
    known = error;
  } else if (isBodyParserError(error)) {
    known = new KisteError('P02', { message: 'Request body could not be read' });
  } else {
    req.log?.error({ err: error }, 'unexpected failure');
    known = new KisteError('P10');
  }
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const retryAfter = retryAfterOf(known);
  if (retryAfter !== null) res.setHeader('retry-after', String(retryAfter));
  for (const [name, value] of Object.entries(known.details.headers ?? {})) res.setHeader(name, value);
  res.status(known.status).setHeader('content-type', 'application/json; charset=utf-8');
  res.end(JSON.stringify(errorEnvelope(known, requestId, services.config.baseUrl)));
}

function isDecodable(path: string): boolean {
  try {
    decodeURIComponent(path);
    return true;
  } catch {
    return false;
  }
}

function isBodyParserError(error: unknown): boolean {
  return typeof error === 'object' && error !== null && 'type' in error && (error as { type: unknown }).type === 'entity.parse.failed';
}
