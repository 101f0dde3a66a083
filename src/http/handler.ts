// The typed shape of a handler, derived from the generated OpenAPI types: a handler for operation K
// receives K's path, query and body types and must answer one of K's success statuses with its body.
import type { operations } from '../generated/api';
import type { OPERATIONS } from '../generated/operations';
import type { AuthContext } from '../domain/auth-context';
import type { Services } from '../services';
import type { WebSocketUpgrade } from './websocket';

type Op<K extends keyof operations> = operations[K];
type OrEmpty<T> = [T] extends [never] ? Record<string, never> : [T] extends [undefined] ? Record<string, never> : NonNullable<T>;

export type PathParams<K extends keyof operations> = OrEmpty<Op<K>['parameters'] extends { path?: infer P } ? P : never>;
export type QueryParams<K extends keyof operations> = OrEmpty<Op<K>['parameters'] extends { query?: infer Q } ? Q : never>;

/** A JSON body, or for application/x-ndjson answers an async stream of its lines (written with backpressure). */
type ContentOf<R> = R extends { content: infer C }
  ? C extends { 'application/x-ndjson': infer Line }
    ? AsyncIterable<Line>
    : C extends Record<string, unknown>
      ? C[keyof C]
      : undefined
  : undefined;
export type RequestBody<K extends keyof operations> = 'requestBody' extends keyof Op<K>
  ? [NonNullable<Op<K>['requestBody']>] extends [never]
    ? undefined
    : ContentOf<NonNullable<Op<K>['requestBody']>> | (undefined extends Op<K>['requestBody'] ? undefined : never)
  : undefined;

type Responses<K extends keyof operations> = Op<K>['responses'];
type SuccessStatus<K extends keyof operations> = {
  [S in keyof Responses<K>]: S extends 101 | 200 | 201 | 202 | 204 | 301 | 302 | 303 | 307 | 308 ? S : never;
}[keyof Responses<K>];

export interface CookieToSet {
  name: string;
  value: string;
  /** Omit for a browser-session cookie; 0 clears it. */
  maxAgeSeconds?: number;
}

export type HandlerResult<K extends keyof operations> = {
  [S in SuccessStatus<K>]: {
    status: S;
    body: ContentOf<Responses<K>[S]>;
    headers?: Record<string, string | undefined>;
    cookies?: CookieToSet[];
  };
}[SuccessStatus<K>];

/** What the pipeline sends, whatever the operation. */
export interface AnyHandlerResult {
  status: number;
  body?: unknown;
  headers?: Record<string, string | undefined>;
  cookies?: CookieToSet[];
}

export interface RequestInfo {
  id: string;
  ip: string;
  userAgent: string | null;
  cookies: Record<string, string>;
  /** True when the client reached us over HTTPS. */
  secure: boolean;
  /** Host header, lower-cased, without port. */
  host: string;
  /** Path and query string as received. */
  url: string;
  /** Aborted when the client goes away before the answer is complete (e.g. to cancel a command). */
  signal: AbortSignal;
  /** A WebSocket handshake the handler may accept (then it answers 101); null for a plain request. */
  upgrade: WebSocketUpgrade | null;
}

type AuthOf<K extends keyof operations> = K extends keyof typeof OPERATIONS
  ? (typeof OPERATIONS)[K]['credentials'] extends readonly [] ? null : AuthContext
  : AuthContext | null;

export interface HandlerContext<K extends keyof operations> {
  params: PathParams<K>;
  query: QueryParams<K>;
  body: RequestBody<K>;
  auth: AuthOf<K>;
  services: Services;
  request: RequestInfo;
}

export type Handler<K extends keyof operations> = (ctx: HandlerContext<K>) => Promise<HandlerResult<K>>;
