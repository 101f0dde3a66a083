// The typed API client: openapi-fetch over the types generated from openapi.yaml (one source of truth
// with the service), and how the CLI shows the service's error envelope.
import createClient from 'openapi-fetch';
import type { paths } from '../src/generated/api';
import type { CliContext } from './context';

export type Api = ReturnType<typeof createClient<paths>>;

export function apiFor(ctx: CliContext): Api {
  return createClient<paths>({ baseUrl: ctx.url, headers: ctx.token ? { authorization: `Bearer ${ctx.token}` } : {} });
}

interface Envelope {
  error?: { code?: string; message?: string; hint?: string; request_id?: string | null };
}

/** A failure the CLI reports and exits with (1 unless the command says otherwise). */
export class CliError extends Error {
  constructor(
    message: string,
    readonly details: { hint?: string; requestId?: string | null; envelope?: unknown; exitCode?: number } = {},
  ) {
    super(message);
  }
}

/** The body of a successful answer, or a CliError carrying the service's message, hint and request id. */
export function ok<T>(result: { data?: T; error?: unknown; response: Response }): T {
  if (result.error === undefined && result.data !== undefined) return result.data;
  throw errorFromEnvelope(result.error, result.response);
}

/** Every item of a cursor-paged list. */
export async function allPages<T>(page: (startingAfter: string | undefined) => Promise<{ data?: { data: T[]; last_id: string | null; has_more: boolean }; error?: unknown; response: Response }>): Promise<T[]> {
  const items: T[] = [];
  let after: string | undefined;
  for (;;) {
    const list = ok(await page(after));
    items.push(...list.data);
    if (!list.has_more || !list.last_id) return items;
    after = list.last_id;
  }
}

export function errorFromEnvelope(body: unknown, response: { status: number; headers: { get(name: string): string | null } }, exitCode?: number): CliError {
  const error = (body as Envelope | undefined)?.error;
  if (error?.message) {
    return new CliError(error.message, { hint: error.hint, requestId: error.request_id ?? response.headers.get('x-request-id'), envelope: body, exitCode });
  }
  return new CliError(`the service answered HTTP ${response.status}`, { requestId: response.headers.get('x-request-id'), envelope: body, exitCode });
}

/** The registry code of an error answer (undefined for a success, or a body that is not the envelope). */
export function errorCode(result: { error?: unknown }): string | undefined {
  return (result.error as Envelope | undefined)?.error?.code;
}

/** The wait an answer asks for with Retry-After (the service sends seconds), else `fallbackMs`. */
export function retryAfterMs(response: { headers: { get(name: string): string | null } }, fallbackMs: number): number {
  const seconds = Number(response.headers.get('retry-after') ?? Number.NaN);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : fallbackMs;
}

export function requireToken(ctx: CliContext): string {
  if (!ctx.token) throw new CliError('no credential', { hint: 'Run `kiste login`, or set KISTE_TOKEN (or pass --token) to an API key.' });
  return ctx.token;
}
