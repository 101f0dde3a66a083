// One webhook POST to a checked target: connects to exactly the address the URL rule checked (a
// pinned `lookup`, so there is no second DNS answer to trust), TLS verified against the system
// roots (or the CA a test injects), SNI and Host from the URL's host name, no redirects followed,
// one deadline for the whole attempt. Reads at most `excerptBytes` of the answer, then hangs up.
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { isIP, type LookupFunction } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { CheckedTarget } from '../domain/webhook-target';

export interface SendRequest {
  target: CheckedTarget;
  headers: Record<string, string>;
  body: string;
  timeoutMs: number;
  excerptBytes: number;
  /** Extra trusted CA certificates (tests); the system roots otherwise. */
  ca?: string | Buffer | (string | Buffer)[];
}

export interface SendResult {
  /** The receiver's HTTP status, or null when no answer came. */
  status: number | null;
  retryAfter: string | null;
  excerpt: string | null;
  durationMs: number;
  /** Why no answer came (connection, TLS, timeout), or null. */
  error: string | null;
}

export type SendWebhook = (request: SendRequest) => Promise<SendResult>;

function describe(error: Error & { code?: string }): string {
  return error.code && !error.message.includes(error.code) ? `${error.code}: ${error.message}` : error.message;
}

export const sendWebhook: SendWebhook = (request) =>
  new Promise<SendResult>((resolve) => {
    const { url, hostname, address, family } = request.target;
    const started = performance.now();
    const secure = url.protocol === 'https:';
    let settled = false;
    let answer: IncomingMessage | null = null;
    const chunks: Buffer[] = [];
    let received = 0;

    const finish = (error: string | null) => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      const excerpt = answer ? Buffer.concat(chunks).subarray(0, request.excerptBytes).toString('utf8') : null;
      const retryAfter = answer?.headers['retry-after'];
      resolve({
        status: answer?.statusCode ?? null,
        retryAfter: typeof retryAfter === 'string' ? retryAfter : null,
        excerpt,
        durationMs: Math.round(performance.now() - started),
        error: answer ? null : error,
      });
      req.destroy();
    };

    // The connection goes to the checked address whatever the name would resolve to now.
    const pinned: LookupFunction = (_hostname, options, callback) => {
      if ((options as { all?: boolean }).all) (callback as unknown as (e: null, a: { address: string; family: number }[]) => void)(null, [{ address, family }]);
      else callback(null, address, family);
    };

    const req = (secure ? httpsRequest : httpRequest)({
      method: 'POST',
      host: hostname,
      port: url.port === '' ? (secure ? 443 : 80) : Number(url.port),
      path: `${url.pathname}${url.search}`,
      headers: { ...request.headers, 'content-length': String(Buffer.byteLength(request.body)) },
      lookup: pinned,
      agent: false,
      ...(secure ? { servername: isIP(hostname) ? undefined : hostname, ...(request.ca ? { ca: request.ca } : {}) } : {}),
    });
    const deadline = setTimeout(() => finish(`no answer within ${request.timeoutMs / 1000} s`), request.timeoutMs);
    req.on('error', (error) => finish(describe(error)));
    req.on('response', (res) => {
      answer = res;
      res.on('data', (chunk: Buffer) => {
        if (received < request.excerptBytes) chunks.push(chunk);
        received += chunk.length;
        if (received >= request.excerptBytes) finish(null);
      });
      res.on('end', () => finish(null));
      res.on('error', () => finish(null));
    });
    req.end(request.body);
  });
