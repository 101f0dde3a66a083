// Events and webhooks benchmark:   npm run bench:events
//
// 1. Long-poll wake latency: kiste listens in this process (SQLite in a temporary data dir; also
//    PostgreSQL when KISTE_DATABASE_URL is set) and BENCH_FOLLOWERS (100) followers each loop on
//    GET /v1/events?after=<cursor>&wait_ms=20000 over keep-alive connections. Each round, once
//    every follower's request is parked, one event is appended (a committed transaction, as every
//    state change does); the latency is from the commit returning to each follower having the
//    answer. Baseline in the same run: a bare node:http long-poll server holding the same number
//    of requests and answering them all from an in-process EventEmitter wake (no database, no auth,
//    no validation) — the floor for "answer a parked HTTP request when something happens".
// 2. Webhook delivery throughput: BENCH_DELIVERIES (2000) events queued for one endpoint (with
//    KISTE_WEBHOOKS_ALLOW_PRIVATE_TARGETS_UNSAFE on: a plain http receiver on loopback), then the
//    delivery worker drains them (claim, URL rule, sign, POST, record); deliveries per second.
//    Baseline in the same run: a bare loop of the same POSTs (same body, same concurrency, a new
//    connection each as the worker makes) to the same receiver.
//
// Target: long-poll answer p50 and p99 within 50 ms of the commit. The exit status is 0 whatever
// the result; PASS/FAIL is printed per target. The figures depend on a quiet machine: the bare
// baselines show what the machine itself allowed in the same run.
// Settings from the environment: BENCH_FOLLOWERS (100), BENCH_ROUNDS (30), BENCH_WARMUP_ROUNDS (5),
// BENCH_DELIVERIES (2000), BENCH_TRACE=1 (per-commit latencies on stderr), KISTE_DATABASE_URL (a
// scratch PostgreSQL database: the bench migrates it and leaves an account and events in it).
import { EventEmitter } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, createServer, request, type Server } from 'node:http';
import { availableParallelism, cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import pino from 'pino';
import { loadConfig } from '../src/config';
import { openDatabase } from '../src/db/database';
import { createApp } from '../src/http/app';
import { createServices, type Services } from '../src/services';
import { appendEvent } from '../src/store/events';
import { PrismaTransactions } from '../src/store/transactions';
import { close, listen, log } from './bench/support';

const FOLLOWERS = Number(process.env.BENCH_FOLLOWERS ?? 100);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 30);
const WARMUP_ROUNDS = Number(process.env.BENCH_WARMUP_ROUNDS ?? 5);
const DELIVERIES = Number(process.env.BENCH_DELIVERIES ?? 2000);
const CONCURRENCY = 16; // the worker's, see src/domain/webhook-deliveries.ts
const LATENCY_TARGET_MS = 50;

function get(agent: Agent, url: string, headers: Record<string, string>): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request(url, { agent, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => (res.statusCode === 200 ? resolve(Buffer.concat(chunks).toString('utf8')) : reject(new Error(`GET ${url}: ${res.statusCode} ${Buffer.concat(chunks)}`))));
    });
    req.on('error', reject);
    req.end();
  });
}

function post(url: string, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', agent: false, headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    });
    req.on('error', reject);
    req.end(body);
  });
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

interface Latency {
  p50: number;
  p99: number;
  max: number;
  samples: number;
}

function summarise(samples: number[]): Latency {
  const sorted = [...samples].sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99), max: sorted.at(-1)!, samples: sorted.length };
}

// The followers run in a worker thread (their own event loop, as separate clients would), plain
// JavaScript: node:http with keep-alive. Times are absolute (timeOrigin + now) across the threads.
const FOLLOWER_CODE = `
const { parentPort, workerData } = require('node:worker_threads');
const { Agent, request } = require('node:http');
const { performance } = require('node:perf_hooks');
const { followers, pollUrl, headers, start } = workerData;
const agent = new Agent({ keepAlive: true, maxSockets: followers + 10 });
const arrivals = {};
let outstanding = 0, newest = start, answeredNewest = followers, stopping = false, readyFor = null;
const now = () => performance.timeOrigin + performance.now();
function get(cursor) {
  return new Promise((resolve, reject) => {
    const req = request(pollUrl.replace('CURSOR', String(cursor)), { agent, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => (text += chunk));
      res.on('end', () => (res.statusCode === 200 ? resolve(text) : reject(new Error(res.statusCode + ' ' + text))));
    });
    req.on('error', reject);
    req.end();
  });
}
function maybeReady() {
  if (outstanding === followers && answeredNewest === followers && readyFor !== newest) {
    readyFor = newest;
    parentPort.postMessage({ type: 'ready', sequence: newest });
  }
}
async function follow() {
  let cursor = start;
  while (!stopping) {
    outstanding++;
    maybeReady();
    const text = await get(cursor);
    const at = now();
    outstanding--;
    const page = JSON.parse(text);
    for (const event of page.data) (arrivals[event.sequence] ??= []).push(at);
    if (page.next_cursor > newest) { newest = page.next_cursor; answeredNewest = 0; }
    if (page.next_cursor === newest && page.data.length > 0) answeredNewest++;
    cursor = page.next_cursor;
  }
}
parentPort.on('message', (message) => { if (message === 'stop') stopping = true; });
Promise.all(Array.from({ length: followers }, follow)).then(
  () => { agent.destroy(); parentPort.postMessage({ type: 'done', arrivals }); },
  (error) => parentPort.postMessage({ type: 'error', message: String(error && error.stack || error) }),
);
`;

/**
 * FOLLOWERS long-poll loops (in a worker thread) against `pollUrl` (CURSOR replaced); WARMUP_ROUNDS
 * and then ROUNDS times: once every follower has its request out, let them park, `commit()`, and
 * time each follower's answer from the commit's return.
 */
async function followLatency(pollUrl: string, headers: Record<string, string>, start: number, commit: () => Promise<number>): Promise<Latency> {
  const worker = new Worker(FOLLOWER_CODE, { eval: true, workerData: { followers: FOLLOWERS, pollUrl, headers, start } });
  const messages: { type: string; sequence?: number; arrivals?: Record<string, number[]>; message?: string }[] = [];
  let notify: () => void = () => undefined;
  worker.on('message', (message) => {
    messages.push(message);
    notify();
  });
  worker.on('error', (error) => {
    messages.push({ type: 'error', message: String(error) });
    notify();
  });
  const next = async (type: string) => {
    for (;;) {
      const index = messages.findIndex((m) => m.type === type || m.type === 'error');
      if (index >= 0) {
        const [message] = messages.splice(index, 1);
        if (message!.type === 'error') throw new Error(`followers failed: ${message!.message}`);
        return message!;
      }
      await new Promise<void>((resolve) => (notify = resolve));
    }
  };
  const committedAt = new Map<number, number>();
  for (let round = 0; round < WARMUP_ROUNDS + ROUNDS + 1; round++) {
    await next('ready');
    await new Promise((resolve) => setTimeout(resolve, 30)); // the requests reach the server and park
    if (round === WARMUP_ROUNDS + ROUNDS) worker.postMessage('stop'); // the last commit only releases the followers
    const sequence = await commit();
    if (round >= WARMUP_ROUNDS && round < WARMUP_ROUNDS + ROUNDS) committedAt.set(sequence, performance.timeOrigin + performance.now());
  }
  const { arrivals } = await next('done');
  await worker.terminate();
  const samples: number[] = [];
  for (const [sequence, t0] of committedAt) {
    const times = arrivals![String(sequence)] ?? [];
    if (times.length !== FOLLOWERS) throw new Error(`event ${sequence}: ${times.length} of ${FOLLOWERS} followers answered`);
    for (const at of times) samples.push(at - t0);
    if (process.env.BENCH_TRACE) {
      const round = summarise(times.map((at) => at - t0));
      log(`event ${sequence}: first ${Math.min(...times.map((at) => at - t0)).toFixed(1)} ms, p50 ${round.p50.toFixed(1)} ms, last ${round.max.toFixed(1)} ms`);
    }
  }
  return summarise(samples);
}

/** The bare long-poll server: parks every GET and answers them all when the emitter fires. */
async function bareLatency(): Promise<Latency> {
  const wake = new EventEmitter();
  wake.setMaxListeners(0);
  let sequence = 0;
  const server = createServer((req, res) => {
    const after = Number(new URL(req.url!, 'http://x').searchParams.get('after'));
    const answer = () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'event_list', data: [{ sequence, object: 'event' }], next_cursor: sequence, has_more: false }));
    };
    if (sequence > after) return answer();
    wake.once('event', answer);
  });
  server.keepAliveTimeout = 65_000;
  const url = await listen(server);
  try {
    return await followLatency(`${url}/v1/events?after=CURSOR&wait_ms=20000`, {}, 0, async () => {
      sequence++;
      wake.emit('event');
      return sequence;
    });
  } finally {
    await close(server);
  }
}

interface Kiste {
  services: Services;
  url: string;
  accountId: string;
  token: string;
  close(): Promise<void>;
}

async function startKiste(databaseUrl: string | undefined, dataDir: string, receiverSetting: boolean): Promise<Kiste> {
  const config = loadConfig({
    KISTE_DATA_DIR: dataDir, KISTE_REQUESTS_PER_MINUTE: '1000000000', KISTE_LOG_LEVEL: 'info',
    ...(receiverSetting ? { KISTE_WEBHOOKS_ALLOW_PRIVATE_TARGETS_UNSAFE: '1' } : {}),
  });
  const database = await openDatabase({ url: databaseUrl, dataDir });
  const services = createServices(config, database);
  const logger = pino({ level: config.logLevel }, pino.destination('/dev/null'));
  const account = await services.accounts.create(`bench-${Date.now()}-${Math.random().toString(36).slice(2)}@example.com`, 'benchmark password', 'Bench');
  const { token } = await services.apiTokens.create(account.id, 'bench', 3600);
  const server = createServer(await createApp(services, logger));
  server.keepAliveTimeout = 65_000;
  const url = await listen(server);
  return {
    services, url, accountId: account.id, token,
    async close() {
      await close(server);
      await database.close();
    },
  };
}

function commitEvent(kiste: Kiste): () => Promise<number> {
  const transactions = new PrismaTransactions(kiste.services.database.prisma);
  return async () =>
    Number(await transactions.run((tx) =>
      appendEvent(tx, kiste.accountId, { type: 'device_key.deleted', resourceType: 'device_key', resourceId: 'bench', data: {} })));
}

async function kisteLatency(kiste: Kiste): Promise<Latency> {
  const headers = { authorization: `Bearer ${kiste.token}` };
  const head = JSON.parse(await get(new Agent(), `${kiste.url}/v1/events`, headers)).next_cursor as number;
  return followLatency(`${kiste.url}/v1/events?after=CURSOR&wait_ms=20000`, headers, head, commitEvent(kiste));
}

interface Throughput {
  perSecond: number;
  count: number;
  seconds: number;
}

async function receiver(): Promise<{ url: string; received: () => number; close(): Promise<void> }> {
  let count = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      count++;
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end('ok');
    });
  });
  const url = await listen(server);
  return { url, received: () => count, close: () => close(server) };
}

async function kisteDeliveries(kiste: Kiste, receiverUrl: string): Promise<Throughput & { body: string }> {
  const { endpoint } = await kiste.services.webhooks.create(kiste.accountId, { name: 'bench', url: `${receiverUrl}/hook`, events: ['device_key.deleted'] });
  const commit = commitEvent(kiste);
  for (let i = 0; i < DELIVERIES; i++) await commit();
  const db = kiste.services.database.prisma;
  const queued = await db.webhookDelivery.count({ where: { endpointId: endpoint.id, state: 'pending' } });
  if (queued !== DELIVERIES) throw new Error(`expected ${DELIVERIES} queued deliveries, found ${queued}`);
  const body = (await db.webhookDelivery.findFirstOrThrow({ where: { endpointId: endpoint.id } })).body;
  const started = performance.now();
  while ((await kiste.services.webhookDeliveries.runDue()) > 0);
  const seconds = (performance.now() - started) / 1000;
  const succeeded = await db.webhookDelivery.count({ where: { endpointId: endpoint.id, state: 'succeeded' } });
  if (succeeded !== DELIVERIES) throw new Error(`only ${succeeded} of ${DELIVERIES} deliveries succeeded`);
  return { perSecond: DELIVERIES / seconds, count: DELIVERIES, seconds, body };
}

async function bareDeliveries(receiverUrl: string, body: string): Promise<Throughput> {
  let next = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next++ < DELIVERIES) {
      const status = await post(`${receiverUrl}/bare`, body);
      if (status !== 200) throw new Error(`bare POST answered ${status}`);
    }
  }));
  const seconds = (performance.now() - started) / 1000;
  return { perSecond: DELIVERIES / seconds, count: DELIVERIES, seconds };
}

async function main(): Promise<void> {
  const targets: { name: string; url: string | undefined }[] = [{ name: 'sqlite', url: undefined }];
  if (process.env.KISTE_DATABASE_URL) targets.push({ name: 'postgresql', url: process.env.KISTE_DATABASE_URL });
  const lines: string[] = [];
  const cpu = cpus()[0]?.model.trim() ?? 'unknown CPU';
  lines.push(`machine: ${availableParallelism()} cores (${cpu}), ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}, ${process.platform}/${process.arch}`);
  lines.push(`long poll: ${FOLLOWERS} followers (in a worker thread), ${ROUNDS} commits after ${WARMUP_ROUNDS} warm-up commits; deliveries: ${DELIVERIES} to one endpoint, ${CONCURRENCY} at a time`);
  lines.push('');

  log('baseline: bare long-poll server woken by an EventEmitter');
  const bare = await bareLatency();
  const rcv = await receiver();
  let bareThroughput: Throughput | null = null;
  const results: string[] = [];
  let pass = true;
  try {
    for (const target of targets) {
      const dataDir = mkdtempSync(join(tmpdir(), 'kiste-bench-events-'));
      try {
        const kiste = await startKiste(target.url, dataDir, true);
        try {
          log(`${target.name}: long-poll latency`);
          const latency = await kisteLatency(kiste);
          log(`${target.name}: webhook deliveries`);
          const deliveries = await kisteDeliveries(kiste, rcv.url);
          if (!bareThroughput) {
            log('baseline: bare POST loop');
            bareThroughput = await bareDeliveries(rcv.url, deliveries.body);
          }
          const ok = latency.p50 <= LATENCY_TARGET_MS && latency.p99 <= LATENCY_TARGET_MS;
          pass &&= ok;
          results.push(
            `${target.name}: commit → long-poll answer  p50 ${latency.p50.toFixed(2)} ms  p99 ${latency.p99.toFixed(2)} ms  max ${latency.max.toFixed(2)} ms  (${latency.samples} answers)` +
              `  vs bare p50 ${(latency.p50 / bare.p50).toFixed(1)}x, p99 ${(latency.p99 / bare.p99).toFixed(1)}x  target p50/p99 <= ${LATENCY_TARGET_MS} ms: ${ok ? 'PASS' : 'FAIL'}`,
            `${target.name}: webhook deliveries  ${deliveries.perSecond.toFixed(0)}/s  (${deliveries.count} in ${deliveries.seconds.toFixed(2)} s)` +
              `  vs bare POST loop ${(deliveries.perSecond / bareThroughput.perSecond).toFixed(2)}x`,
          );
        } finally {
          await kiste.close();
        }
      } finally {
        rmSync(dataDir, { recursive: true, force: true });
      }
    }
  } finally {
    await rcv.close();
  }
  lines.push(`baseline: bare long poll (EventEmitter wake)  p50 ${bare.p50.toFixed(2)} ms  p99 ${bare.p99.toFixed(2)} ms  max ${bare.max.toFixed(2)} ms  (${bare.samples} answers)`);
  lines.push(`baseline: bare POST loop  ${bareThroughput!.perSecond.toFixed(0)}/s  (${bareThroughput!.count} in ${bareThroughput!.seconds.toFixed(2)} s)`);
  lines.push(...results);
  lines.push(`long-poll target: ${pass ? 'PASS' : 'FAIL'}`);
  process.stdout.write(lines.join('\n') + '\n');
}

main().catch((error: unknown) => {
  console.error('bench failed:', error instanceof Error ? error.stack : error);
  process.exitCode = 1;
});
