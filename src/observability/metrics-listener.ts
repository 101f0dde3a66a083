// The scrape endpoint, on a listener of its own (KISTE_METRICS_LISTEN), never the public one: GET
// /metrics, with `Authorization: Bearer <KISTE_METRICS_TOKEN>` when a token is configured (required
// off loopback, see config.ts). Anything else answers 404; a wrong or missing token 401.
import { createServer, type Server } from 'node:http';
import { sha256Hex } from '../domain/secrets';
import { safeEqual } from '../protocol/safe-equal';
import type { ServiceMetrics } from './metrics';

export interface MetricsListenerSettings {
  host: string;
  port: number;
  token: string | null;
}

export async function listenForMetrics(settings: MetricsListenerSettings, metrics: ServiceMetrics, logger: { warn(o: object, m: string): void }): Promise<{ url: string; close(): Promise<void> }> {
  const server: Server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    if (settings.token && !bearerMatches(req.headers.authorization, settings.token)) {
      res.writeHead(401, { 'content-type': 'text/plain', 'www-authenticate': 'Bearer' }).end('unauthorized\n');
      return;
    }
    metrics.text().then(
      ({ contentType, body }) => res.writeHead(200, { 'content-type': contentType }).end(body),
      (error: Error) => {
        logger.warn({ err: error }, 'metrics could not be collected');
        res.writeHead(500, { 'content-type': 'text/plain' }).end('metrics could not be collected\n');
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(settings.port, settings.host, () => resolve());
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : settings.port;
  const host = settings.host.includes(':') ? `[${settings.host}]` : settings.host;
  return {
    url: `http://${host}:${port}/metrics`,
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}

/** Compares digests, so neither the token's length nor its bytes leak through timing. */
function bearerMatches(header: string | undefined, token: string): boolean {
  const match = /^Bearer (.+)$/.exec(header ?? '');
  if (!match) return false;
  return safeEqual(sha256Hex(match[1]!), sha256Hex(token));
}
