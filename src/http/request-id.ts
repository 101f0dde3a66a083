// x-request-id: keep a client's own value when it is short and made of safe characters,
// otherwise make one. Every answer carries it; error bodies repeat it.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

const SAFE_REQUEST_ID = /^[A-Za-z0-9._:@-]{1,128}$/;

export function requestIdOf(req: IncomingMessage): string {
  const offered = req.headers['x-request-id'];
  if (typeof offered === 'string' && SAFE_REQUEST_ID.test(offered)) return offered;
  return `req_${randomUUID().replace(/-/g, '')}`; // randomUUID draws from a cached entropy pool: cheap per request
}
