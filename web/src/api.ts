// The console's typed API client: openapi-fetch over the types generated from openapi.yaml (the same
// ones the service and the CLI use). The browser session is the cookie; state-changing requests carry
// the session's CSRF token, which lives only in memory (never in localStorage).
import createClient, { type Middleware } from 'openapi-fetch';
import type { components, paths } from '../../src/generated/api';

export type Schemas = components['schemas'];
export type Instance = Schemas['InstanceResponse'];

let csrfToken: string | null = null;

export function setCsrf(token: string | null): void {
  csrfToken = token;
}

const csrf: Middleware = {
  onRequest({ request }) {
    if (csrfToken && !['GET', 'HEAD'].includes(request.method)) request.headers.set('x-csrf-token', csrfToken);
    return request;
  },
};

export const api = createClient<paths>({ baseUrl: '', credentials: 'same-origin' });
api.use(csrf);

/** What the service said went wrong: the envelope's message, hint and request id. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string | null,
    readonly hint: string | null,
    readonly requestId: string | null,
    readonly retryAfterSeconds: number | null = null,
  ) {
    super(message);
  }
}

interface Envelope {
  error?: { code?: string; message?: string; hint?: string; request_id?: string | null };
}

export function apiError(body: unknown, response: Response | undefined): ApiError {
  const error = (body as Envelope | undefined)?.error;
  const requestId = error?.request_id ?? response?.headers.get('x-request-id') ?? null;
  const retryAfter = Number(response?.headers.get('retry-after'));
  return new ApiError(
    error?.message ?? (response ? `The service answered HTTP ${response.status}.` : 'The service could not be reached.'),
    response?.status ?? 0,
    error?.code ?? null,
    error?.hint ?? null,
    requestId,
    Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter : null,
  );
}

/** The data of an answer, or an ApiError; a sign-in that ended sends the console to the sign-in page. */
export async function ok<T>(pending: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  let result: { data?: T; error?: unknown; response: Response };
  try {
    result = await pending;
  } catch (cause) {
    if (cause instanceof DOMException && cause.name === 'AbortError') throw cause;
    throw apiError(undefined, undefined);
  }
  if (result.response.ok && result.error === undefined) return result.data as T;
  const error = apiError(result.error, result.response);
  // A 401 from anything but the sign-in calls themselves (a wrong password) means the session ended.
  if (error.status === 401 && !new URL(result.response.url).pathname.startsWith('/v1/auth/')) signedOutListeners.forEach((listener) => listener());
  throw error;
}

const signedOutListeners = new Set<() => void>();

/** Called when an answer says the browser session is gone (expired, revoked elsewhere). */
export function onSignedOut(listener: () => void): () => void {
  signedOutListeners.add(listener);
  return () => signedOutListeners.delete(listener);
}
