// One request through kiste, in order: body limit → credential → budget → content type → JSON →
// CSRF → spec validation → compute reachable → handler → answer. Each rule lives here once, driven
// by the operation's generated metadata (x-kiste-* in openapi.yaml).
import type { Request, Response } from 'express';
import { OPERATIONS, OperationId, OperationMeta } from '../generated/operations';
import { handlers } from '../generated/handler-registry';
import { KisteError } from '../errors';
import type { AuthContext } from '../domain/auth-context';
import type { Services } from '../services';
import { clientNetwork } from '../net/client-network';
import { mediaTypeOf, parseBody, readBody } from './body';
import { checkWebSocketOrigin, servesHttps } from './browser-edges';
import { parseCookies, setCookies, SESSION_COOKIE } from './cookies';
import type { AnyHandlerResult, RequestInfo } from './handler';
import { validateBody, validateParameters } from './validation';
import { upgradeOf } from './websocket';

/** Bodies of requests to operations that take none are still bounded. */
const NO_BODY_LIMIT = 64 * 1024;
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

export interface RoutedRequest {
  operationId: string;
  pathParams: Record<string, string>;
}

export async function runOperation(services: Services, routed: RoutedRequest, req: Request, res: Response): Promise<void> {
  const meta: OperationMeta = OPERATIONS[routed.operationId as OperationId];
  const info = requestInfo(req, res, services);
  // Before anything else (the body, the credential): a browser on another site's page gets nowhere.
  if (info.upgrade) checkWebSocketOrigin(services.config, req.headers.origin);

  const raw = await readBody(req, meta.bodyLimit ?? NO_BODY_LIMIT);
  const auth = await authenticate(services, meta, info, req);
  takeBudget(services, meta, auth, info);

  let body: unknown = undefined;
  if (meta.requestContentTypes.length > 0 && raw.length > 0) {
    const mediaType = mediaTypeOf(req.headers['content-type']);
    if (!mediaType || !meta.requestContentTypes.includes(mediaType)) {
      throw new KisteError('P04', {
        message: `Content-Type must be ${meta.requestContentTypes.join(' or ')}`,
        param: 'content-type',
      });
    }
    body = parseBody(raw, mediaType);
  }
  if (auth?.kind === 'browser' && !SAFE_METHODS.has(meta.method)) checkCsrf(services, auth, req, body);

  if (!meta.implemented) {
    throw new KisteError('P09', { message: `${meta.method} ${meta.path} is not implemented yet` });
  }
  const parameters = { path: { ...routed.pathParams }, query: { ...(req.query as Record<string, unknown>) } };
  validateParameters(meta.operationId, parameters);
  if (meta.requestContentTypes.length > 0) {
    if (body === undefined && meta.bodyRequired) {
      throw new KisteError('P01', { message: 'Request body is required', param: null });
    }
    if (body !== undefined) validateBody(meta.operationId, body);
  }
  refuseNulCharacters({ ...parameters.path, ...parameters.query }, '');
  refuseNulCharacters(body, '');
  // The machines' host (a local worker being started again) would fail the call at once.
  if (meta.needsCompute && !services.machineHost.reachable()) throw new KisteError('N01');

  const handler = handlers[meta.operationId as keyof typeof handlers] as unknown as (ctx: unknown) => Promise<AnyHandlerResult>;
  let result: AnyHandlerResult;
  try {
    result = await handler({ params: parameters.path, query: parameters.query, body, auth, services, request: info });
  } finally {
    // A write may end or change credentials of the account (logout, revoke, unlock, deletion…):
    // the cached ones are read afresh on the next request.
    if (auth && !SAFE_METHODS.has(meta.method)) await services.credentials.forgetAccount(auth.accountId);
  }
  await sendResult(res, result, info.secure);
}

function requestInfo(req: Request, res: Response, services: Services): RequestInfo {
  const host = (req.headers.host ?? '').toLowerCase().replace(/:\d+$/, '');
  const secure = servesHttps(services.config);
  let gone: AbortController | undefined;
  return {
    id: (req as Request & { id: string }).id,
    ip: req.socket.remoteAddress ?? 'unknown',
    userAgent: typeof req.headers['user-agent'] === 'string' ? req.headers['user-agent'].slice(0, 512) : null,
    cookies: parseCookies(req, secure),
    secure,
    host,
    url: req.originalUrl,
    upgrade: upgradeOf(req),
    // Made on first use: only streaming handlers (exec) watch for the client going away.
    get signal(): AbortSignal {
      if (!gone) {
        const controller = (gone = new AbortController());
        if (res.closed) {
          if (!res.writableFinished) controller.abort();
        } else {
          res.once('close', () => {
            if (!res.writableFinished) controller.abort();
          });
        }
      }
      return gone.signal;
    },
  };
}

async function authenticate(services: Services, meta: OperationMeta, info: RequestInfo, req: Request): Promise<AuthContext | null> {
  if (meta.credentials.length === 0) return null;
  const header = req.headers.authorization;
  let auth: AuthContext;
  if (header !== undefined) {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!match) throw new KisteError('A02', { message: 'Authorization header must be "Bearer <token>"', param: 'authorization' });
    auth = await services.credentials.authenticateBearer(match[1]!);
  } else if (info.cookies[SESSION_COOKIE]) {
    auth = await services.credentials.authenticateBrowser(info.cookies[SESSION_COOKIE]!);
  } else {
    throw new KisteError('A01');
  }
  if (!meta.credentials.includes(auth.kind)) {
    throw new KisteError(meta.credentialRefusal, {
      message: `A ${credentialName(auth.kind)} cannot be used for ${meta.method} ${meta.path}`,
    });
  }
  return auth;
}

function credentialName(kind: AuthContext['kind']): string {
  return { browser: 'browser session', cli: 'CLI sign-in', api_key: 'API key' }[kind];
}

function takeBudget(services: Services, meta: OperationMeta, auth: AuthContext | null, info: RequestInfo): void {
  const key = auth ? `account:${auth.accountId}` : `address:${clientNetwork(info.ip)}`;
  const verdicts = [services.budgets.take(`${meta.rateBudget}:${key}`, services.limits.budget(meta.rateBudget))];
  if (meta.rateBudget !== 'default') verdicts.push(services.budgets.take(`default:${key}`, services.limits.budget('default')));
  const refused = verdicts.find((verdict) => !verdict.allowed);
  if (refused) {
    throw new KisteError('L01', {
      message: `Per-minute request budget "${meta.rateBudget}" is spent`,
      retryAfterSeconds: refused.retryAfterSeconds,
    });
  }
}

function checkCsrf(services: Services, auth: AuthContext, req: Request, body: unknown): void {
  const header = req.headers['x-csrf-token'];
  const fromBody = body && typeof body === 'object' && 'csrf' in body ? (body as { csrf: unknown }).csrf : undefined;
  const offered = typeof header === 'string' ? header : typeof fromBody === 'string' ? fromBody : undefined;
  if (!offered || !services.credentials.csrfMatches(auth.credentialId, offered)) {
    throw new KisteError('A03', { param: 'x-csrf-token' });
  }
}

async function sendResult(res: Response, result: AnyHandlerResult, secure: boolean): Promise<void> {
  if (result.status === 101) return; // the handler accepted a WebSocket upgrade: the handshake answered it
  if (result.cookies?.length) setCookies(res, result.cookies, secure);
  for (const [name, value] of Object.entries(result.headers ?? {})) if (value !== undefined) res.setHeader(name, value);
  res.status(result.status);
  if (result.body === undefined || result.status === 204) {
    res.end();
  } else if (isAsyncIterable(result.body)) {
    await streamLines(res, result.body);
  } else if (typeof result.body === 'string') {
    if (!res.getHeader('content-type')) res.setHeader('content-type', 'text/plain; charset=utf-8');
    res.end(result.body);
  } else {
    res.setHeader('content-type', 'application/json; charset=utf-8');
    res.end(JSON.stringify(result.body));
  }
}

function drainedOrClosed(res: Response): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

/**
 * No stored or passed-on text may hold U+0000: PostgreSQL text refuses it and C strings (argv, env,
 * file names in the guest) end at it. One rule for every field, after the spec's own validation.
 */
function refuseNulCharacters(value: unknown, path: string): void {
  if (typeof value === 'string') {
    if (value.includes('\u0000')) throw new KisteError('P01', { message: `Field '${path || 'body'}' contains a NUL character`, param: path || null });
  } else if (Array.isArray(value)) {
    value.forEach((item, index) => refuseNulCharacters(item, `${path}[${index}]`));
  } else if (value && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) {
      refuseNulCharacters(key, path);
      refuseNulCharacters(item, path ? `${path}.${key}` : key);
    }
  }
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return typeof value === 'object' && value !== null && Symbol.asyncIterator in value;
}

/** application/x-ndjson: one JSON value per line, flushed as it comes, waiting for the client to drain. */
async function streamLines(res: Response, lines: AsyncIterable<unknown>): Promise<void> {
  res.setHeader('content-type', 'application/x-ndjson; charset=utf-8');
  res.setHeader('cache-control', 'no-store');
  res.flushHeaders();
  for await (const line of lines) {
    if (res.destroyed) break;
    if (!res.write(JSON.stringify(line) + '\n')) await drainedOrClosed(res);
  }
  res.end();
}
