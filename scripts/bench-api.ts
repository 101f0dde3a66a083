// API overhead benchmark:   npm run bench:api
//
// Starts kiste in this process on SQLite in a temporary data dir (the real app: openapi-backend
// routing, pipeline, API-key lookup, pino-http logging at info level into /dev/null so the JSON
// serialisation cost is paid as in production), mints an API key and loads GET /v1/me with
// `Authorization: Bearer <key>`. In the same run it loads a bare Express 5 app that answers GET /v1/me
// with a fixed body of the same shape, with the same settings. The load generator (autocannon) runs
// in a worker thread, so it does not share the servers' event loop.
//
// Targets: kiste reaches at least half the bare app's req/s, and kiste's p99 latency is under 20 ms.
// The exit status is 0 whatever the result; PASS/FAIL is printed per target.
// Settings from the environment: BENCH_CONNECTIONS (50), BENCH_SECONDS (10), BENCH_WARMUP_SECONDS (3).
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { availableParallelism, cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import express from 'express';
import pino from 'pino';
import { loadConfig } from '../src/config';
import { openDatabase } from '../src/db/database';
import { createApp } from '../src/http/app';
import { createServices } from '../src/services';
import { close, listen, log } from './bench/support';

interface Histogram {
  average: number;
  p50: number;
  p99: number;
  max: number;
}
interface AutocannonResult {
  requests: Histogram & { total: number };
  latency: Histogram;
  duration: number;
  errors: number;
  timeouts: number;
  non2xx: number;
  statusCodeStats?: Record<string, { count: number }>;
}
type Autocannon = (options: Record<string, unknown>) => Promise<AutocannonResult>;
// autocannon ships no type declarations; this is the part of its programmatic API used here.
const autocannon: Autocannon = require('autocannon');

const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const WARMUP_SECONDS = Number(process.env.BENCH_WARMUP_SECONDS ?? 3);
const RATIO_TARGET = 0.5;
const P99_TARGET_MS = 20;

interface Measured {
  name: string;
  reqPerSec: number;
  p50: number;
  p99: number;
  max: number;
  total: number;
  non2xx: number;
  errors: number;
}

async function measure(name: string, url: string, headers: Record<string, string>): Promise<Measured> {
  const options = { url: `${url}/v1/me`, headers, connections: CONNECTIONS, pipelining: 1, workers: 1 };
  log(`${name}: warm-up ${WARMUP_SECONDS} s`);
  await autocannon({ ...options, duration: WARMUP_SECONDS });
  log(`${name}: measuring ${SECONDS} s at ${CONNECTIONS} connections`);
  const result = await autocannon({ ...options, duration: SECONDS });
  return {
    name,
    reqPerSec: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    max: result.latency.max,
    total: result.requests.total,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
  };
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'kiste-bench-'));
  const servers: Server[] = [];
  try {
    // The per-account request budget (default 600/min) would turn the load into 429s: raise it.
    const config = loadConfig({ KISTE_DATA_DIR: dataDir, KISTE_REQUESTS_PER_MINUTE: '1000000000', KISTE_LOG_LEVEL: 'info' });
    const database = await openDatabase({ url: undefined, dataDir });
    const services = createServices(config, database);
    const logger = pino({ level: config.logLevel }, pino.destination('/dev/null'));
    const account = await services.accounts.create('bench@example.com', 'benchmark password', 'Bench User');
    const { token } = await services.apiTokens.create(account.id, 'bench', 3600);

    const kisteServer = createServer(await createApp(services, logger));
    kisteServer.keepAliveTimeout = 65_000; // as src/server.ts
    servers.push(kisteServer);
    const kisteUrl = await listen(kisteServer);

    // The bare app answers what GET /v1/me answers, as a constant (same fields, same size order).
    const meBody = {
      id: account.id,
      object: 'user',
      email: account.email,
      name: account.name,
      created_at: account.createdAt.toISOString(),
      sign_in_locked: false,
    };
    const bare = express();
    bare.disable('x-powered-by');
    bare.get('/v1/me', (_req, res) => {
      res.json(meBody);
    });
    const bareServer = createServer(bare);
    bareServer.keepAliveTimeout = 65_000;
    servers.push(bareServer);
    const bareUrl = await listen(bareServer);

    // One request each first: both answer 200 with bodies of the same size order.
    const auth = { authorization: `Bearer ${token}` };
    const [kisteProbe, bareProbe] = await Promise.all([fetch(`${kisteUrl}/v1/me`, { headers: auth }), fetch(`${bareUrl}/v1/me`)]);
    const [kisteBody, bareBody] = [await kisteProbe.text(), await bareProbe.text()];
    if (kisteProbe.status !== 200 || bareProbe.status !== 200) throw new Error(`probe failed: kiste ${kisteProbe.status} ${kisteBody}, bare ${bareProbe.status}`);
    log(`GET /v1/me body: kiste ${kisteBody.length} bytes, bare ${bareBody.length} bytes`);

    const kiste = await measure('kiste', kisteUrl, auth);
    const bareResult = await measure('bare express', bareUrl, {});

    const cpu = cpus()[0]?.model.trim() ?? 'unknown CPU';
    const lines: string[] = [];
    lines.push(`machine: ${availableParallelism()} cores (${cpu}), ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}, ${process.platform}/${process.arch}`);
    lines.push(`load: GET /v1/me, ${CONNECTIONS} connections, ${SECONDS} s after ${WARMUP_SECONDS} s warm-up, autocannon in a worker thread`);
    lines.push('');
    const header = ['server', 'req/s', 'p50 ms', 'p99 ms', 'max ms', 'requests', 'non-2xx', 'errors'];
    const rows = [kiste, bareResult].map((m) => [m.name, m.reqPerSec.toFixed(0), m.p50.toFixed(1), m.p99.toFixed(1), m.max.toFixed(1), String(m.total), String(m.non2xx), String(m.errors)]);
    const widths = header.map((title, i) => Math.max(title.length, ...rows.map((row) => row[i]!.length)));
    const line = (cells: string[]) => cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ');
    lines.push(line(header), ...rows.map(line), '');
    const ratio = kiste.reqPerSec / bareResult.reqPerSec;
    const clean = kiste.non2xx === 0 && kiste.errors === 0 && bareResult.non2xx === 0 && bareResult.errors === 0;
    lines.push(`ratio kiste/bare req/s: ${ratio.toFixed(2)} (target >= ${RATIO_TARGET}): ${ratio >= RATIO_TARGET ? 'PASS' : 'FAIL'}`);
    lines.push(`kiste p99 latency: ${kiste.p99.toFixed(1)} ms (target < ${P99_TARGET_MS} ms): ${kiste.p99 < P99_TARGET_MS ? 'PASS' : 'FAIL'}`);
    if (!clean) lines.push('WARNING: some answers were not 2xx or failed; the figures above are not comparable');
    process.stdout.write(lines.join('\n') + '\n');

    await Promise.all(servers.map(close));
    await database.close();
    logger.flush();
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  console.error('bench failed:', error instanceof Error ? error.stack : error);
  process.exitCode = 1;
});
