// The Express 5 app. openapi-backend matches each request to an operation of openapi.yaml and
// parses its path parameters (unknown routes and wrong methods answer 404/405); runOperation does the rest.
import express, { NextFunction, Request, Response } from 'express';
import OpenAPIBackend, { Operation } from 'openapi-backend';
import pinoHttp from 'pino-http';
import type { Logger } from 'pino';
import spec from '../generated/openapi.json';
import { errorEnvelope, KisteError, retryAfterOf } from '../errors';
import { cameFromUnreachableHost } from '../compute/machine-host';
import type { Services } from '../services';
import { HSTS, servesHttps } from './browser-edges';
import { runOperation } from './pipeline';
import { SERVICE_UPGRADES, type ServiceUpgrades } from './websocket';
import { requestIdOf } from './request-id';
import { allowedMethods, operationFor, operationsForPath } from './routes';

export async function createApp(services: Services, logger: Logger): Promise<express.Express> {
  // openapi-backend is used as the spec's router and parameter parser. Its handleRequest would also
  // run security and validation steps and parse every request twice; kiste's pipeline owns those
  // steps (driven by x-kiste-* metadata and the generated ajv validators), so it calls the router directly.
  const api = new OpenAPIBackend({ definition: spec as any, validate: false, quick: true, strict: false });
  await api.init();
  useCompiledRoutes(api);

  const app = express();
  app.disable('x-powered-by');
  app.set('query parser', 'simple');
  // Hosts of published services are the proxy's alone, before anything of kiste's (HSTS, logs, routes).
  const proxy = services.serviceProxy;
  app.use((req: Request, res: Response, next: NextFunction) => {
    if (!proxy.claims(req)) return next();
    proxy.serve(req, res).catch(() => res.destroy());
  });
  (app as ServiceUpgrades)[SERVICE_UPGRADES] = (req, socket, head) => {
    if (!proxy.claims(req)) return false;
    proxy.upgrade(req, socket, head).catch(() => socket.destroy());
    return true;
  };
  if (servesHttps(services.config)) {
    app.use((_req: Request, res: Response, next: NextFunction) => {
      res.setHeader('strict-transport-security', HSTS);
      next();
    });
  }
  app.use(
    pinoHttp({
      logger,
      // The request id is made (or kept) here, once: it is logged with every line and sent back.
      genReqId: (req, res) => {
        const id = requestIdOf(req);
        res.setHeader('x-request-id', id);
        return id;
      },
      // Credentials never reach the log: no auth or cookie headers, no query strings (export tokens).
      // The serializers read the raw objects (no wrapping: pino-std-serializers would copy every header).
      wrapSerializers: false,
      serializers: {
        req: (req: Request) => ({ id: req.id, method: req.method, path: req.url.split('?')[0], remoteAddress: req.socket?.remoteAddress }),
        res: (res: Response) => ({ statusCode: res.statusCode, ...(res.locals?.errorCode ? { code: res.locals.errorCode } : {}) }),
      },
      // A refusal the service means (503 K06 while the first image builds, asked again every few
      // seconds) is one line naming its code, not an error with pino-http's stand-in stack; a failure
      // it did not mean (P10) is logged with its real error by sendError and stays an error here.
      customLogLevel: (_req: Request, res: Response, error?: Error) => {
        if (res.statusCode < 500 && !error) return 'info';
        return error || !res.locals?.errorCode || res.locals.errorCode === 'P10' ? 'error' : 'warn';
      },
      customErrorMessage: (_req: Request, res: Response) => (res.locals?.errorCode ? 'request refused' : 'request errored'),
      customErrorObject: (_req: Request, res: Response, _error: Error, value: Record<string, unknown>) => {
        if (!res.locals?.errorCode) return value;
        const { err: _standIn, ...rest } = value;
        return rest;
      },
    }),
  );
  app.use(async (req: Request, res: Response) => {
    // The router decodes path parameters with decodeURIComponent; broken %-escapes are the client's error.
    if (!isDecodable(req.path)) throw new KisteError('P01', { message: 'The request path has a malformed %-escape' });
    const request = { method: req.method, path: req.path, headers: req.headers as Record<string, string> };
    const operation = routeOf(api, request);
    // Only templated paths have parameters to parse (parseRequest also re-reads headers and cookies).
    const params = operation.path.includes('{') ? api.router.parseRequest(request, operation).params : {};
    await runOperation(services, { operationId: operation.operationId!, pathParams: params as Record<string, string> }, req, res);
  });
  app.use((error: unknown, req: Request, res: Response, _next: NextFunction) => {
    sendError(services, error, req, res);
  });
  return app;
}

/** The operation a request names, or 404 P05 / 405 P06 (with Allow) from the router's verdict. */
function routeOf(api: OpenAPIBackend, request: { method: string; path: string; headers: Record<string, string> }): Operation {
  try {
    return api.router.matchOperation(request, true);
  } catch (error) {
    const method = request.method.toUpperCase();
    if (error instanceof Error && error.message.startsWith('405')) {
      throw new KisteError('P06', {
        message: `${method} is not allowed on ${request.path}`,
        headers: { allow: allowedMethods(request.path).join(', ') },
      });
    }
    throw new KisteError('P05', { message: `No route for ${method} ${request.path}` });
  }
}

/**
 * openapi-backend's router rebuilds its operation list and compiles a RegExp per operation on every
 * request (0.3–0.8 ms with ~100 operations). The document never changes while we run, so it matches
 * against routes compiled once (routes.ts) and keeps openapi-backend's own 404/405 signalling.
 */
function useCompiledRoutes(api: OpenAPIBackend): void {
  const operations = api.router.getOperations();
  const byId = new Map(operations.map((operation) => [operation.operationId, operation]));
  api.router.getOperations = () => operations;
  api.router.matchOperation = ((req: { method: string; path: string }, strict?: boolean) => {
    const match = operationFor(req.method, req.path);
    if (match) return byId.get(match.operationId);
    if (!strict) return undefined;
    const pathKnown = operationsForPath(req.path).length > 0;
    throw new Error(pathKnown ? '405-methodNotAllowed: no such method on this path' : '404-notFound: no route matches request');
  }) as typeof api.router.matchOperation;
}

export function sendError(services: Services, error: unknown, req: Request, res: Response): void {
  const requestId = (req as Request & { id?: string }).id ?? null;
  let known: KisteError;
  if (error instanceof KisteError) {
    known = error;
  } else if (cameFromUnreachableHost(error)) {
    req.log?.warn({ err: error }, 'the compute worker cannot be reached');
    known = new KisteError('N01');
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
  res.locals.errorCode = known.code; // for the request's log line
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

