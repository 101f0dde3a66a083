// Machine timings benchmark:   npm run bench:machines
//
// Every figure of the service is printed beside a raw QEMU baseline measured in the same run, on the
// minimal image (built or refreshed first in $KISTE_IMAGE_DIR, default /tmp/kiste-image-cache, the
// tests' image folder), with the same shape (vCPUs, memory, disk), the same accelerator (probed as the
// server does, or $KISTE_ACCELERATOR) and guest RAM in a file, as the service runs machines.
//
// kiste runs in this process on SQLite in a temporary data dir: the real app on a real listening
// socket, an account and an API key. Every HTTP request is made from a worker thread (its own event
// loop), over one keep-alive connection; NDJSON streams are read to the `completed` line and the
// output is base64-decoded and counted there. The raw baselines use the QEMU driver
// (src/compute/qemu: overlay, command line, startMachine, saveMemory, restoreMemory) and an
// AgentClient on the machine's virtio-serial socket directly: no service, domain or HTTP layer.
//
//   figure                 kiste                                          raw baseline
//   create-to-ready        POST /v1/instances answered 200                QEMU boot until the agent says ready (SSH listening)
//   stop with session      POST /stop {"snapshot":true}                   saveMemory (QEMU quits)
//   resume with session    POST /resume                                   restoreMemory (-incoming) until the agent answers
//   fork disk (target)     machineHost.forkDisk of a running machine,     qemu-img create of an overlay (same disk sizes)
//                          2 GiB and 16 GiB virtual disks
//   fork (whole POST)      POST /fork answered 200 (includes the copy's   raw boot + overlay
//                          cold boot: NOT the fork target)
//   exec `true` p50/p99    POST /exec, NDJSON until completed             AgentClient exec on the socket
//   exec stdout MB/s       `head -c 64M /dev/zero` through POST /exec     the same through AgentClient
//
// Through the worker (the process split, issue 22): a second service whose machines run in a
// supervised kiste-worker, as `npm start` runs them, makes the same cold create (booting alone) and
// the same execs, alternating with the in-process service and raw QEMU; its rows set it beside the
// in-process service of the same run. The rows above run kiste in this process (KISTE_COMPUTE=
// in-process): they reach into the host (fork disk, boot snapshots).
//
// Order: the boots run alone (raw boot, then kiste's create, with no other machine of this run up);
// the shorter figures alternate raw and kiste (exec batches, stream runs, save/stop/restore/resume
// rounds, overlay/forkDisk pairs) so that both see the same noise from whatever else the host runs.
//
// Targets: create <= 1.2x raw boot; resume <= 1 s (0.3 s with file-backed RAM, which the service
// uses); fork disk <= 1 s and independent of the disk size; exec p50 <= 50 ms; exec >= 50 MB/s;
// through the worker, create-to-ready and exec p50 within 10 % of the in-process service.
// The exit status is 0 whatever the figures (1 only on errors or when a QEMU is left behind).
// Settings from the environment: BENCH_VCPU (2), BENCH_MEMORY_MIB (1024), BENCH_EXEC_RUNS (50),
// BENCH_STREAM_MIB (64), BENCH_STREAM_RUNS (1), BENCH_SESSION_ROUNDS (3), BENCH_FORK_REPEATS (7),
// KISTE_ACCELERATOR (auto: probed), KISTE_IMAGE_DIR (/tmp/kiste-image-cache).
import { randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import { availableParallelism, cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import pino from 'pino';
import { buildAgent } from '../agent/build';
import { buildImage, readLatestImage } from '../images';
import { AgentClient } from '../src/compute/agent-client';
import { generateHostKeys } from '../src/compute/ssh-host-keys';
import {
  copyRamFile,
  createOverlay,
  killMachine,
  liveFork,
  listQemuProcesses,
  machineFiles,
  type MachineSpec,
  probeAccelerator,
  type QemuMachine,
  restoreMemory,
  saveMemory,
  startMachine,
} from '../src/compute/qemu';
import { loadConfig } from '../src/config';
import { openDatabase, type Database } from '../src/db/database';
import { createApp } from '../src/http/app';
import { createServices, type Services } from '../src/services';
import { TEST_IMAGE_DIR } from '../test/support/images';
import { close, listen, log, startWorkerService } from './bench/support';

const VCPU = Number(process.env.BENCH_VCPU ?? 2);
const MEMORY_MIB = Number(process.env.BENCH_MEMORY_MIB ?? 1024);
const DISK_MIB = 2048;
const BIG_DISK_MIB = 16384;
const EXEC_RUNS = Number(process.env.BENCH_EXEC_RUNS ?? 50);
const EXEC_WARMUP = 3;
const STREAM_MIB = Number(process.env.BENCH_STREAM_MIB ?? 64);
const FORK_REPEATS = Number(process.env.BENCH_FORK_REPEATS ?? 7);
const EXEC_BATCH = 10;
const STREAM_RUNS = Number(process.env.BENCH_STREAM_RUNS ?? 1);
const SESSION_ROUNDS = Number(process.env.BENCH_SESSION_ROUNDS ?? 3);
const INSTANT_ROUNDS = Number(process.env.BENCH_INSTANT_ROUNDS ?? 3);
const BOOT_TIMEOUT_MS = 300_000;
const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 bench@kiste';
const MIB = 1024 * 1024;

const benchStarted = performance.now();

const ms = (start: number) => performance.now() - start;
const median = (values: number[]) => percentile(values, 0.5);
/** Nearest-rank percentile. */
function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;
}

// ---------------------------------------------------------------------------------------------
// HTTP client in a worker thread: plain JavaScript (no TypeScript loader needed in the worker).

const CLIENT_SOURCE = `
const { parentPort } = require('node:worker_threads');
const http = require('node:http');
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const now = () => Number(process.hrtime.bigint()) / 1e6;

function send(base, token, method, path, body) {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const headers = { authorization: 'Bearer ' + token };
    if (payload) Object.assign(headers, { 'content-type': 'application/json', 'content-length': payload.length });
    const started = now();
    const req = http.request(base + path, { method, agent, headers }, (res) => {
      const ndjson = String(res.headers['content-type'] || '').startsWith('application/x-ndjson');
      if (!ndjson) {
        const parts = [];
        res.on('data', (chunk) => parts.push(chunk));
        res.on('end', () => {
          const text = Buffer.concat(parts).toString('utf8');
          let json = null;
          try { json = text ? JSON.parse(text) : null; } catch { json = text; }
          resolve({ status: res.statusCode, ms: now() - started, body: json });
        });
        res.on('error', reject);
        return;
      }
      // NDJSON: every line parsed, every output chunk decoded; the clock stops at 'completed'.
      let pending = '';
      let stdoutBytes = 0;
      let last = null;
      let doneMs = null;
      let lines = 0;
      res.setEncoding('utf8');
      res.on('data', (text) => {
        pending += text;
        let nl;
        while ((nl = pending.indexOf('\\n')) >= 0) {
          const line = pending.slice(0, nl);
          pending = pending.slice(nl + 1);
          if (!line) continue;
          const event = JSON.parse(line);
          lines++;
          if (event.type === 'output' && event.stream === 'stdout') stdoutBytes += Buffer.from(event.data_base64, 'base64').length;
          if ((event.type === 'completed' || event.type === 'failed') && doneMs === null) doneMs = now() - started;
          last = event;
        }
      });
      res.on('end', () => resolve({ status: res.statusCode, ms: doneMs ?? now() - started, body: last, stdoutBytes, lines }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(payload);
  });
}

parentPort.on('message', async ({ id, base, token, method, path, body, repeat }) => {
  try {
    const results = [];
    for (let i = 0; i < (repeat || 1); i++) results.push(await send(base, token, method, path, body));
    parentPort.postMessage({ id, results });
  } catch (error) {
    parentPort.postMessage({ id, error: String(error && error.stack || error) });
  }
});
`;

interface HttpResult {
  status: number;
  ms: number;
  body: any;
  stdoutBytes?: number;
  lines?: number;
}

class HttpClient {
  private readonly worker = new Worker(CLIENT_SOURCE, { eval: true });
  private next = 1;
  private readonly waiting = new Map<number, { resolve: (r: HttpResult[]) => void; reject: (e: Error) => void }>();

  constructor(
    private readonly base: string,
    private readonly token: string,
  ) {
    this.worker.on('message', (message: { id: number; results?: HttpResult[]; error?: string }) => {
      const waiter = this.waiting.get(message.id);
      this.waiting.delete(message.id);
      if (message.error !== undefined) waiter?.reject(new Error(`HTTP client: ${message.error}`));
      else waiter?.resolve(message.results!);
    });
    this.worker.on('error', (error) => {
      for (const waiter of this.waiting.values()) waiter.reject(error);
      this.waiting.clear();
    });
  }

  /** `repeat` requests one after the other on the keep-alive connection. */
  many(method: string, path: string, body: unknown, repeat: number): Promise<HttpResult[]> {
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.worker.postMessage({ id, base: this.base, token: this.token, method, path, body, repeat });
    });
  }

  async one(method: string, path: string, body?: unknown): Promise<HttpResult> {
    return (await this.many(method, path, body, 1))[0]!;
  }

  /** One request that must answer `status`; otherwise the error names the answer. */
  async expect(status: number, method: string, path: string, body?: unknown): Promise<HttpResult> {
    const result = await this.one(method, path, body);
    if (result.status !== status) throw new Error(`${method} ${path}: expected ${status}, got ${result.status}: ${JSON.stringify(result.body)}`);
    return result;
  }

  close(): Promise<number> {
    return this.worker.terminate();
  }
}

// ---------------------------------------------------------------------------------------------
// Raw QEMU machine: the driver's building blocks, as QemuMachineHost uses them.

interface ImageFiles {
  dir: string;
  version: string;
  cmdline: string;
}

class RawMachine {
  readonly files;
  machine: QemuMachine | undefined;
  agent: AgentClient | undefined;

  constructor(
    readonly dir: string,
    private readonly image: ImageFiles,
    private readonly accelerator: 'kvm' | 'tcg',
    /** The disk file when it is not the machine folder's own (a fork's layer). */
    private readonly diskFile?: string,
  ) {
    this.files = machineFiles(dir);
    mkdirSync(join(dir, 'run'), { recursive: true });
  }

  get disk(): string {
    return this.diskFile ?? join(this.dir, 'disk.qcow2');
  }

  spec(): MachineSpec {
    return {
      id: `bench-raw-${process.pid}`,
      vcpu: VCPU,
      memoryMib: MEMORY_MIB,
      kernel: join(this.image.dir, 'vmlinuz'),
      initrd: join(this.image.dir, 'initrd.img'),
      disk: this.disk,
      appendArgs: this.image.cmdline,
      accelerator: this.accelerator,
      qmpSocket: this.files.qmpSocket,
      agentSocket: this.files.agentSocket,
      serialLog: this.files.serialLog,
      pidFile: this.files.pidFile,
      memoryFile: this.files.memoryFile,
      generationId: true, // as kiste's machines
    };
  }

  /**
   * What kiste does to a guest restored from someone else's memory image (boot snapshot, fork with
   * memory), done directly: grow the disk, personalise with new host keys, set the clock.
   */
  async personaliseRestored(hostname: string, diskBytes?: number): Promise<void> {
    const agent = this.openAgent();
    await agent.waitConnected(60_000);
    if (diskBytes !== undefined) await this.machine!.qmp.execute('block_resize', { 'node-name': 'disk0', size: diskBytes });
    const keys = generateHostKeys();
    await Promise.all([
      agent.personalise({
        hostname, authorized_keys: [SSH_KEY], regenerate_host_keys: true,
        host_keys: keys.map((key) => ({ algorithm: key.algorithm, private_key: key.privateKey, public_key: key.publicKey })),
        restored: { disk_bytes: diskBytes, entropy: randomBytes(64).toString('base64') },
      }),
      agent.setTime(Date.now()),
    ]);
    await agent.waitReady(60_000);
  }

  openAgent(): AgentClient {
    const socket = this.files.agentSocket;
    this.agent = new AgentClient({ connect: () => connect(socket) });
    return this.agent;
  }

  closeAgent(): void {
    this.agent?.close();
    this.agent = undefined;
  }

  async kill(): Promise<void> {
    this.closeAgent();
    if (this.machine?.alive()) await killMachine(this.machine);
    this.machine = undefined;
  }
}

async function rawExec(agent: AgentClient, argv: string[]): Promise<{ ms: number; stdoutBytes: number; exitCode: number }> {
  const started = performance.now();
  const handle = await agent.exec({ argv });
  let stdoutBytes = 0;
  for await (const chunk of handle) if (chunk.stream === 'stdout') stdoutBytes += chunk.data.length;
  const exit = await handle.exit;
  return { ms: ms(started), stdoutBytes, exitCode: exit.exit_code };
}

// ---------------------------------------------------------------------------------------------
// Results

interface Row {
  figure: string;
  kiste: string;
  raw: string;
  ratio: string;
  target: string;
  met: string;
}

const fmtS = (value: number) => `${(value / 1000).toFixed(2)} s`;
const fmtMs = (value: number) => `${value.toFixed(1)} ms`;
const fmtRatio = (kiste: number, raw: number) => (raw > 0 ? `${(kiste / raw).toFixed(2)}x` : 'n/a');
const yes = (ok: boolean) => (ok ? 'yes' : 'NO');

function table(rows: Row[]): string {
  const header: Row = { figure: 'figure', kiste: 'kiste', raw: 'raw QEMU', ratio: 'ratio', target: 'target', met: 'met' };
  const keys = Object.keys(header) as (keyof Row)[];
  const widths = keys.map((key) => Math.max(...[header, ...rows].map((row) => row[key].length)));
  const line = (row: Row) => keys.map((key, i) => (i === 0 || i >= 4 ? row[key].padEnd(widths[i]!) : row[key].padStart(widths[i]!))).join('  ').trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const workDir = mkdtempSync(join(tmpdir(), 'kiste-bench-'));
  const dataDir = join(workDir, 'data');
  const raw: { machine?: RawMachine } = {};
  let database: Database | undefined;
  let services: Services | undefined;
  let server: Server | undefined;
  let client: HttpClient | undefined;
  let splitClient: HttpClient | undefined;
  let stopSplit: (() => Promise<void>) | undefined;
  let failed = false;
  try {
    // --- image and accelerator ---------------------------------------------------------------
    log(`image: building or refreshing the minimal image in ${TEST_IMAGE_DIR} (cached: seconds; first time about 1.5 min)`);
    const agentBundle = await buildAgent();
    await buildImage({ profile: 'minimal', outDir: TEST_IMAGE_DIR, agentBundle: agentBundle.outfile });
    const latest = await readLatestImage(TEST_IMAGE_DIR, 'minimal');
    if (!latest) throw new Error(`no minimal image in ${TEST_IMAGE_DIR}`);
    const image: ImageFiles = { dir: latest.dir, version: latest.manifest.version, cmdline: latest.manifest.kernel_cmdline };
    const config = loadConfig({
      KISTE_DATA_DIR: dataDir,
      KISTE_IMAGE_DIR: TEST_IMAGE_DIR,
      KISTE_IMAGE_PROFILE: 'minimal',
      KISTE_ACCELERATOR: process.env.KISTE_ACCELERATOR ?? 'auto',
      KISTE_REQUESTS_PER_MINUTE: '1000000000',
      KISTE_LOG_LEVEL: 'info',
      KISTE_BOOT_SNAPSHOTS: 'on', // the instant rows need them; the cold rows drop this configuration's first (forgetBootSnapshots)
      KISTE_COMPUTE: 'in-process', // the rows below reach into the host (fork disk, boot snapshots); the split has rows of its own
    });
    const choice = config.accelerator === 'auto' ? await probeAccelerator() : { accelerator: config.accelerator, reason: 'configured (KISTE_ACCELERATOR)', probeMs: 0 };
    const accelerator = choice.accelerator;
    log(`image ${image.version}; accelerator ${accelerator} (${choice.reason})`);

    // --- the service (started first; it runs no machine until the create) -----------------------
    log('kiste: starting the service in this process (SQLite, real listening socket)');
    database = await openDatabase({ url: undefined, dataDir });
    const serviceLog = pino({ level: 'warn' }, pino.destination(2));
    services = createServices(config, database, { accelerator, logger: serviceLog });
    const host = services.compute.inProcess!.machineHost;
    if (!(await host.refreshImage('minimal'))) throw new Error('the service does not see the minimal image');
    const account = await services.accounts.create('bench@example.com', 'benchmark password', 'Bench User');
    const { token } = await services.apiTokens.create(account.id, 'bench', 3600);
    // Request logs as in production (pino-http at info), into /dev/null.
    server = createServer(await createApp(services, pino({ level: config.logLevel }, pino.destination('/dev/null'))));
    server.keepAliveTimeout = 65_000; // as src/server.ts
    client = new HttpClient(await listen(server), token);
    const http = client;
    const shape = { profile: 'desktop', vcpu: VCPU, memory_mib: MEMORY_MIB, ssh_public_key: SSH_KEY };

    // --- boots: each one alone (no other machine of this run is running) -------------------------
    const rawMachine = new RawMachine(join(workDir, 'raw'), image, accelerator);
    raw.machine = rawMachine;
    mkdirSync(rawMachine.dir, { recursive: true });
    await createOverlay(join(image.dir, 'disk.qcow2'), rawMachine.disk, { sizeBytes: DISK_MIB * MIB });
    log(`raw: booting the image with plain QEMU (${VCPU} vCPU, ${MEMORY_MIB} MiB file-backed RAM, ${DISK_MIB} MiB overlay) until the agent says ready`);
    let started = performance.now();
    rawMachine.machine = await startMachine(rawMachine.spec());
    const bootAgent = rawMachine.openAgent();
    await bootAgent.waitConnected(BOOT_TIMEOUT_MS);
    const rawHelloMs = ms(started);
    await bootAgent.waitReady(BOOT_TIMEOUT_MS);
    const rawBootMs = ms(started);
    log(`raw: agent first answer ${fmtS(rawHelloMs)}, ready with SSH listening ${fmtS(rawBootMs)}`);

    // What a create does beyond the raw boot (diagnostic: explains part of the create ratio).
    started = performance.now();
    await bootAgent.personalise({ hostname: 'bench-raw', authorized_keys: [SSH_KEY], regenerate_host_keys: true });
    await bootAgent.waitReady(60_000);
    const rawPersonaliseMs = ms(started);
    log(`raw: personalise with new SSH host keys, until ready again: ${fmtS(rawPersonaliseMs)}`);

    const rawSaveMs: number[] = [];
    const rawRestoreMs: number[] = [];
    const rawRestoreQemuMs: number[] = [];
    const rawRestoreHelloMs: number[] = [];
    let rawStateBytes = 0;
    const rawSave = async () => {
      rawMachine.closeAgent();
      const t0 = performance.now();
      const saved = await saveMemory(rawMachine.machine!, { stateFile: rawMachine.files.stateFile });
      rawSaveMs.push(ms(t0));
      rawStateBytes = saved.stateBytes;
      rawMachine.machine = undefined;
      log(`raw: saveMemory ${fmtS(rawSaveMs.at(-1)!)} (${saved.stateBytes} bytes of state, ignore-shared ${saved.ignoreShared})`);
    };
    const rawRestore = async () => {
      const t0 = performance.now();
      const restored = await restoreMemory(rawMachine.spec(), { stateFile: rawMachine.files.stateFile });
      rawMachine.machine = restored.machine;
      const agent = rawMachine.openAgent();
      await agent.waitConnected(60_000);
      rawRestoreHelloMs.push(ms(t0));
      await agent.ready({ timeoutMs: 60_000 });
      rawRestoreMs.push(ms(t0));
      rawRestoreQemuMs.push(restored.restoreMs);
      log(`raw: restoreMemory ${fmtS(restored.restoreMs)}, agent hello ${fmtS(rawRestoreHelloMs.at(-1)!)}, answered ${fmtS(rawRestoreMs.at(-1)!)}`);
    };
    log('raw: saveMemory (pause, device state to a file, QEMU quits)');
    await rawSave();

    // --- through the worker (the process split): a second service whose machines run in a supervised
    // kiste-worker, as `npm start` runs them. Its cold create boots alone, as the in-process one below
    // does (the raw machine saved, nothing else running, no boot snapshot's template booting beside
    // it); its machine is then stopped with its session until the split's exec rows resume it.
    log('split: a second service whose machines run in a supervised kiste-worker');
    const split = await startWorkerService(join(workDir, 'split'), accelerator);
    stopSplit = split.stop;
    const splitHttp = new HttpClient(split.base, split.token);
    splitClient = splitHttp;
    log(`split: POST /v1/instances (${DISK_MIB} MiB disk) until 200, through the worker (cold: boot snapshots off)`);
    const splitCreated = await splitHttp.expect(200, 'POST', '/v1/instances', { ...shape, name: 'bench-split', disk_mib: DISK_MIB });
    const splitFrom = (await runningEvent(splitHttp, splitCreated.body.id as string))?.data as { started_from?: string } | undefined;
    if (splitFrom?.started_from !== 'boot') throw new Error(`the create through the worker did not boot cold: ${JSON.stringify(splitFrom)}`);
    log(`split: create answered 200 after ${fmtS(splitCreated.ms)} (raw boot ${fmtS(rawBootMs)})`);
    await lifecycle(splitHttp, 'POST', '/v1/instances/bench-split/stop', { snapshot: true }, 'stopped');

    // The create-to-ready rows are cold creates: an earlier run's boot snapshot of this configuration
    // is dropped first (as the service drops one that fails to restore), and the one this create
    // starts in the background is awaited before anything else is measured beside it.
    forgetBootSnapshots(image.dir, { vcpu: VCPU, memoryMib: MEMORY_MIB });
    log(`kiste: POST /v1/instances (${DISK_MIB} MiB disk) until 200 (a cold create: no boot snapshot of this configuration yet)`);
    const created = await http.expect(200, 'POST', '/v1/instances', { ...shape, name: 'bench-a', disk_mib: DISK_MIB });
    const idA = created.body.id as string;
    const createdFrom = (await runningEvent(http, idA))?.data as { started_from?: string } | undefined;
    if (createdFrom?.started_from !== 'boot') throw new Error(`the first create did not boot cold: ${JSON.stringify(createdFrom)}`);
    log(`kiste: create answered 200 after ${fmtS(created.ms)}; waiting for the boot snapshot it started in the background`);
    const snapshotStarted = performance.now();
    const snapshot = await host.makeBootSnapshot(host.currentImage('minimal')!, { vcpu: VCPU, memoryMib: MEMORY_MIB });
    if (!snapshot) throw new Error('no boot snapshot was made (see the warnings above)');
    log(`kiste: boot snapshot ready ${fmtS(ms(snapshotStarted))} after the create answered`);

    log('raw: restoreMemory (-incoming defer, migrate-incoming) until the agent answers');
    await rawRestore();

    // --- exec: raw and kiste alternate in batches, so both see the same noise ----------------------
    const execPath = '/v1/instances/bench-a/exec';
    log(`exec \`true\`: ${EXEC_RUNS} runs each, raw and kiste alternating in batches of ${EXEC_BATCH}`);
    const rawExecMs: number[] = [];
    const execMs: number[] = [];
    const checkTrue = (runs: HttpResult[]) => {
      for (const run of runs) if (run.status !== 200 || run.body?.type !== 'completed' || run.body.exit_code !== 0) throw new Error(`exec true: ${run.status} ${JSON.stringify(run.body)}`);
      return runs.map((run) => run.ms);
    };
    for (let i = 0; i < EXEC_WARMUP; i++) await rawExec(rawMachine.agent!, ['true']);
    checkTrue(await http.many('POST', execPath, { argv: ['true'] }, EXEC_WARMUP));
    for (let done = 0; done < EXEC_RUNS; done += EXEC_BATCH) {
      const batch = Math.min(EXEC_BATCH, EXEC_RUNS - done);
      for (let i = 0; i < batch; i++) rawExecMs.push((await rawExec(rawMachine.agent!, ['true'])).ms);
      execMs.push(...checkTrue(await http.many('POST', execPath, { argv: ['true'] }, batch)));
    }

    const streamArgv = ['head', '-c', `${STREAM_MIB}M`, '/dev/zero'];
    log(`exec \`${streamArgv.join(' ')}\`: ${STREAM_RUNS} run(s) each, raw and kiste alternating`);
    const rawMBps: number[] = [];
    const streamMBps: number[] = [];
    let streamLines = 0;
    for (let i = 0; i < STREAM_RUNS; i++) {
      const rawStream = await rawExec(rawMachine.agent!, streamArgv);
      if (rawStream.stdoutBytes !== STREAM_MIB * MIB) throw new Error(`raw stream: ${rawStream.stdoutBytes} bytes, expected ${STREAM_MIB * MIB}`);
      rawMBps.push(rawStream.stdoutBytes / 1e6 / (rawStream.ms / 1000));
      const stream = await http.expect(200, 'POST', execPath, { argv: streamArgv });
      if (stream.body?.type !== 'completed' || stream.stdoutBytes !== STREAM_MIB * MIB) {
        throw new Error(`exec stream: ${stream.stdoutBytes} bytes decoded, last line ${JSON.stringify(stream.body)}`);
      }
      streamMBps.push(stream.stdoutBytes! / 1e6 / (stream.ms / 1000));
      streamLines = stream.lines ?? 0;
      log(`exec stream: raw ${rawMBps.at(-1)!.toFixed(1)} MB/s, kiste ${streamMBps.at(-1)!.toFixed(1)} MB/s (${streamLines} NDJSON lines)`);
    }

    // Diagnostic: the same command with its output thrown away in the guest: the guest's own cost.
    const guestOnly = await rawExec(rawMachine.agent!, ['sh', '-c', `${streamArgv.join(' ')} > /dev/null`]);
    const guestOnlyMBps = (STREAM_MIB * MIB) / 1e6 / (guestOnly.ms / 1000);
    log(`exec stream: in the guest alone (output to /dev/null) ${guestOnlyMBps.toFixed(1)} MB/s`);

    // --- through the worker: exec beside the in-process service and raw QEMU ----------------------
    await lifecycle(splitHttp, 'POST', '/v1/instances/bench-split/resume', undefined, 'running');
    const splitExecPath = '/v1/instances/bench-split/exec';
    log(`split: exec \`true\`: ${EXEC_RUNS} runs each, raw, in-process and through the worker alternating in batches of ${EXEC_BATCH}`);
    const splitRawExecMs: number[] = [];
    const splitInProcessExecMs: number[] = [];
    const splitExecMs: number[] = [];
    checkTrue(await splitHttp.many('POST', splitExecPath, { argv: ['true'] }, EXEC_WARMUP));
    for (let done = 0; done < EXEC_RUNS; done += EXEC_BATCH) {
      const batch = Math.min(EXEC_BATCH, EXEC_RUNS - done);
      for (let i = 0; i < batch; i++) splitRawExecMs.push((await rawExec(rawMachine.agent!, ['true'])).ms);
      splitInProcessExecMs.push(...checkTrue(await http.many('POST', execPath, { argv: ['true'] }, batch)));
      splitExecMs.push(...checkTrue(await splitHttp.many('POST', splitExecPath, { argv: ['true'] }, batch)));
    }
    const splitStream = await splitHttp.expect(200, 'POST', splitExecPath, { argv: streamArgv });
    if (splitStream.body?.type !== 'completed' || splitStream.stdoutBytes !== STREAM_MIB * MIB) throw new Error(`exec stream through the worker: ${splitStream.stdoutBytes} bytes decoded`);
    const splitMBps = splitStream.stdoutBytes! / 1e6 / (splitStream.ms / 1000);
    const splitInProcessStream = await http.expect(200, 'POST', execPath, { argv: streamArgv });
    const splitInProcessMBps = splitInProcessStream.stdoutBytes! / 1e6 / (splitInProcessStream.ms / 1000);
    log(`split: exec p50 through the worker ${fmtMs(percentile(splitExecMs, 0.5))}, in-process ${fmtMs(percentile(splitInProcessExecMs, 0.5))}, raw ${fmtMs(percentile(splitRawExecMs, 0.5))}; stream ${splitMBps.toFixed(1)} MB/s, in-process ${splitInProcessMBps.toFixed(1)} MB/s`);
    await lifecycle(splitHttp, 'DELETE', '/v1/instances/bench-split', undefined, 'deleted');
    await splitHttp.close();
    splitClient = undefined;
    await split.stop();
    stopSplit = undefined;

    // --- memory sessions: raw save, kiste stop, raw restore, kiste resume, in rounds --------------
    const stopMs: number[] = [];
    const resumeMs: number[] = [];
    let fileBacked = false;
    let stateBytes = -1;
    for (let round = 1; round <= SESSION_ROUNDS; round++) {
      log(`sessions, round ${round}/${SESSION_ROUNDS}: raw save, kiste stop, raw restore, kiste resume`);
      await rawSave();
      const stop = await lifecycle(http, 'POST', '/v1/instances/bench-a/stop', { snapshot: true }, 'stopped');
      if (stop.body.session_saved !== true) throw new Error(`stop did not save the session: ${JSON.stringify(stop.body)}`);
      stopMs.push(stop.ms);
      const kisteFiles = machineFiles(join(dataDir, 'machines', idA));
      fileBacked = existsSync(kisteFiles.memoryFile);
      const stateFile = kisteFiles.stateFile;
      stateBytes = existsSync(stateFile) ? statSync(stateFile).size : -1;
      log(`kiste: stop answered after ${fmtS(stop.ms)} (state file ${stateBytes} bytes, file-backed RAM ${fileBacked})`);
      await rawRestore();
      const resume = await lifecycle(http, 'POST', '/v1/instances/bench-a/resume', undefined, 'running');
      resumeMs.push(resume.ms);
      log(`kiste: resume answered after ${fmtS(resume.ms)}`);
    }
    // --- instant machines: create from a boot snapshot, fork with memory -------------------------
    const snapshotCreateMs: number[] = [];
    const rawSnapshotMs: number[] = [];
    for (let round = 1; round <= INSTANT_ROUNDS; round++) {
      log(`create from the boot snapshot, round ${round}/${INSTANT_ROUNDS}: raw restore + personalisation, then kiste's create`);
      const copy = new RawMachine(join(workDir, `raw-copy-${round}`), image, accelerator);
      let t0 = performance.now();
      await createOverlay(snapshot.disk, copy.disk, { sizeBytes: snapshot.diskBytes });
      await copyRamFile(snapshot.memoryFile, copy.files.memoryFile);
      copyFileSync(snapshot.stateFile, copy.files.stateFile);
      copy.machine = (await restoreMemory(copy.spec(), { stateFile: copy.files.stateFile })).machine;
      await copy.personaliseRestored(`raw-copy-${round}`, DISK_MIB * MIB);
      rawSnapshotMs.push(ms(t0));
      await copy.kill();
      rmSync(copy.dir, { recursive: true, force: true });
      t0 = performance.now();
      const fromSnapshot = await http.expect(200, 'POST', '/v1/instances', { ...shape, name: `bench-snap-${round}`, disk_mib: DISK_MIB });
      snapshotCreateMs.push(ms(t0));
      const started = await runningEvent(http, fromSnapshot.body.id as string);
      if ((started?.data as { started_from?: string } | undefined)?.started_from !== 'snapshot') throw new Error(`create ${round} did not start from the snapshot: ${JSON.stringify(started?.data)}`);
      log(`create from the snapshot: raw ${fmtS(rawSnapshotMs.at(-1)!)}, kiste ${fmtS(snapshotCreateMs.at(-1)!)}`);
      await lifecycle(http, 'DELETE', `/v1/instances/bench-snap-${round}`, undefined, 'deleted');
    }

    const forkMemoryMs: number[] = [];
    const forkPausedMs: number[] = [];
    const rawForkMemoryMs: number[] = [];
    const rawForkPausedMs: number[] = [];
    for (let round = 1; round <= INSTANT_ROUNDS; round++) {
      log(`fork with memory, round ${round}/${INSTANT_ROUNDS}: raw (pause, disk fork, device state, RAM copy, run on; restore the copy, personalise), then kiste's POST /fork {"memory":true}`);
      const source = rawMachine.machine!;
      const forkDisk = join(workDir, `raw-fork-${round}.qcow2`);
      const copy = new RawMachine(join(workDir, `raw-fork-${round}`), image, accelerator, forkDisk);
      let t0 = performance.now();
      await source.qmp.execute('stop');
      await liveFork(source.qmp, { newActiveFile: join(workDir, `raw-top-${round}.qcow2`), newActiveNode: `disk${round}`, forkFile: forkDisk });
      await saveMemory(source, { stateFile: copy.files.stateFile, quit: false });
      await copyRamFile(rawMachine.files.memoryFile, copy.files.memoryFile);
      await source.qmp.execute('cont');
      rawForkPausedMs.push(ms(t0));
      copy.machine = (await restoreMemory(copy.spec(), { stateFile: copy.files.stateFile })).machine;
      await copy.personaliseRestored(`raw-fork-${round}`);
      rawForkMemoryMs.push(ms(t0));
      await copy.kill();
      t0 = performance.now();
      const forked = await http.expect(200, 'POST', '/v1/instances/bench-a/fork', { name: `bench-mem-${round}`, memory: true });
      forkMemoryMs.push(ms(t0));
      const started = await runningEvent(http, forked.body.id as string);
      forkPausedMs.push(Number((started?.data as { source_paused_ms?: number } | undefined)?.source_paused_ms ?? NaN));
      log(`fork with memory: raw ${fmtS(rawForkMemoryMs.at(-1)!)} (source paused ${fmtMs(rawForkPausedMs.at(-1)!)}), kiste ${fmtS(forkMemoryMs.at(-1)!)} (source paused ${fmtMs(forkPausedMs.at(-1)!)})`);
      await lifecycle(http, 'DELETE', `/v1/instances/bench-mem-${round}`, undefined, 'deleted');
    }
    await rawMachine.kill();

    // --- forks -----------------------------------------------------------------------------------
    const forkDiskMs: Record<number, number[]> = { [DISK_MIB]: [], [BIG_DISK_MIB]: [] };
    const rawOverlayMs: Record<number, number[]> = { [DISK_MIB]: [], [BIG_DISK_MIB]: [] };
    const timeForks = async (sourceId: string, size: number) => {
      log(`fork disk, ${size} MiB: machineHost.forkDisk of the running machine and raw qemu-img create of an overlay, alternating, ${FORK_REPEATS} times each`);
      const base = join(workDir, `overlay-base-${size}.qcow2`);
      await createOverlay(join(image.dir, 'disk.qcow2'), base, { sizeBytes: size * MIB });
      for (let i = 0; i < FORK_REPEATS; i++) {
        const overlay = join(workDir, `overlay-${size}-${i}.qcow2`);
        let t0 = performance.now();
        await createOverlay(base, overlay);
        rawOverlayMs[size]!.push(ms(t0));
        rmSync(overlay, { force: true });
        const target = `bench-fork-${size}-${i}`;
        t0 = performance.now();
        await host.forkDisk(sourceId, target);
        forkDiskMs[size]!.push(ms(t0));
        await host.destroy(target);
      }
    };
    await timeForks(idA, DISK_MIB);

    log('kiste: POST /v1/instances/bench-a/fork until 200 (includes the copy\'s cold boot)');
    const fork = await http.expect(200, 'POST', '/v1/instances/bench-a/fork', { name: 'bench-b' });
    log(`kiste: fork answered 200 after ${fmtS(fork.ms)}`);
    for (const name of ['bench-b', 'bench-a']) await lifecycle(http, 'DELETE', `/v1/instances/${name}`, undefined, 'deleted');

    log(`kiste: POST /v1/instances (${BIG_DISK_MIB} MiB disk) until 200`);
    forgetBootSnapshots(image.dir, { vcpu: VCPU, memoryMib: MEMORY_MIB }); // cold again, as the first create
    const createdBig = await http.expect(200, 'POST', '/v1/instances', { ...shape, name: 'bench-c', disk_mib: BIG_DISK_MIB });
    log(`kiste: create answered 200 after ${fmtS(createdBig.ms)}; waiting for the boot snapshot it started in the background`);
    await host.makeBootSnapshot(host.currentImage('minimal')!, { vcpu: VCPU, memoryMib: MEMORY_MIB });
    await timeForks(createdBig.body.id as string, BIG_DISK_MIB);
    await lifecycle(http, 'DELETE', '/v1/instances/bench-c', undefined, 'deleted');

    // --- report ---------------------------------------------------------------------------------
    const fork2 = median(forkDiskMs[DISK_MIB]!);
    const fork16 = median(forkDiskMs[BIG_DISK_MIB]!);
    const overlay2 = median(rawOverlayMs[DISK_MIB]!);
    const overlay16 = median(rawOverlayMs[BIG_DISK_MIB]!);
    // Independent of size: the big disk is not slower beyond noise (half again, or 50 ms).
    const sizeIndependent = fork16 <= 1.5 * fork2 + 50;
    const resumeTargetMs = fileBacked ? 300 : 1000;
    const stop = median(stopMs);
    const resume = median(resumeMs);
    const rawSaveMedian = median(rawSaveMs);
    const rawRestoreMedian = median(rawRestoreMs);
    const execP50 = percentile(execMs, 0.5);
    const execP99 = percentile(execMs, 0.99);
    const rawP50 = percentile(rawExecMs, 0.5);
    const rawP99 = percentile(rawExecMs, 0.99);
    const mbps = median(streamMBps);
    const rawMbps = median(rawMBps);
    const rows: Row[] = [
      { figure: `create-to-ready (${DISK_MIB} MiB disk)`, kiste: fmtS(created.ms), raw: fmtS(rawBootMs), ratio: fmtRatio(created.ms, rawBootMs), target: '<= 1.2x raw', met: yes(created.ms <= 1.2 * rawBootMs) },
      { figure: `create-to-ready (${BIG_DISK_MIB} MiB disk)`, kiste: fmtS(createdBig.ms), raw: fmtS(rawBootMs), ratio: fmtRatio(createdBig.ms, rawBootMs), target: '<= 1.2x raw', met: yes(createdBig.ms <= 1.2 * rawBootMs) },
      { figure: 'create from boot snapshot', kiste: fmtS(median(snapshotCreateMs)), raw: fmtS(median(rawSnapshotMs)), ratio: fmtRatio(median(snapshotCreateMs), median(rawSnapshotMs)), target: '<= 1.3x raw', met: yes(median(snapshotCreateMs) <= 1.3 * median(rawSnapshotMs)) },
      { figure: '  … against resume with session', kiste: fmtS(median(snapshotCreateMs)), raw: fmtS(median(resumeMs)), ratio: fmtRatio(median(snapshotCreateMs), median(resumeMs)), target: '<= 1.5x resume', met: yes(median(snapshotCreateMs) <= 1.5 * median(resumeMs)) },
      { figure: '  … against a cold create', kiste: fmtS(median(snapshotCreateMs)), raw: fmtS(created.ms), ratio: fmtRatio(median(snapshotCreateMs), created.ms), target: '(yardstick)', met: 'n/a' },
      { figure: 'fork with memory', kiste: fmtS(median(forkMemoryMs)), raw: fmtS(median(rawForkMemoryMs)), ratio: fmtRatio(median(forkMemoryMs), median(rawForkMemoryMs)), target: '(yardstick)', met: 'n/a' },
      { figure: '  … against resume with session', kiste: fmtS(median(forkMemoryMs)), raw: fmtS(median(resumeMs)), ratio: fmtRatio(median(forkMemoryMs), median(resumeMs)), target: '<= 2x resume', met: yes(median(forkMemoryMs) <= 2 * median(resumeMs)) },
      { figure: '  … source paused', kiste: fmtMs(median(forkPausedMs)), raw: fmtMs(median(rawForkPausedMs)), ratio: fmtRatio(median(forkPausedMs), median(rawForkPausedMs)), target: '(report)', met: 'n/a' },
      { figure: 'stop with session', kiste: fmtS(stop), raw: fmtS(rawSaveMedian), ratio: fmtRatio(stop, rawSaveMedian), target: '(none given)', met: 'n/a' },
      { figure: 'resume with session', kiste: fmtS(resume), raw: fmtS(rawRestoreMedian), ratio: fmtRatio(resume, rawRestoreMedian), target: fileBacked ? '<= 0.3 s (file RAM)' : '<= 1 s', met: yes(resume <= resumeTargetMs) },
      { figure: `FORK TARGET: fork disk ${DISK_MIB} MiB`, kiste: fmtMs(fork2), raw: fmtMs(overlay2), ratio: fmtRatio(fork2, overlay2), target: '<= 1 s', met: yes(fork2 <= 1000) },
      { figure: `FORK TARGET: fork disk ${BIG_DISK_MIB} MiB`, kiste: fmtMs(fork16), raw: fmtMs(overlay16), ratio: fmtRatio(fork16, overlay16), target: '<= 1 s, not > 2 GiB', met: yes(fork16 <= 1000 && sizeIndependent) },
      { figure: 'fork, whole POST (+copy boot)', kiste: fmtS(fork.ms), raw: fmtS(rawBootMs + overlay2), ratio: fmtRatio(fork.ms, rawBootMs + overlay2), target: '(not the target)', met: 'n/a' },
      { figure: 'exec `true` p50', kiste: fmtMs(execP50), raw: fmtMs(rawP50), ratio: fmtRatio(execP50, rawP50), target: '<= 50 ms', met: yes(execP50 <= 50) },
      { figure: 'exec `true` p99', kiste: fmtMs(execP99), raw: fmtMs(rawP99), ratio: fmtRatio(execP99, rawP99), target: '(none given)', met: 'n/a' },
      { figure: `exec stdout, ${STREAM_MIB} MiB`, kiste: `${mbps.toFixed(1)} MB/s`, raw: `${rawMbps.toFixed(1)} MB/s`, ratio: fmtRatio(mbps, rawMbps), target: '>= 50 MB/s', met: yes(mbps >= 50) },
    ];
    // The split: kiste through its worker in the kiste column, the in-process service in the raw column.
    const splitP50 = percentile(splitExecMs, 0.5);
    const splitInP50 = percentile(splitInProcessExecMs, 0.5);
    const splitRows: Row[] = [
      { figure: `create-to-ready (${DISK_MIB} MiB), worker vs in-process`, kiste: fmtS(splitCreated.ms), raw: fmtS(created.ms), ratio: fmtRatio(splitCreated.ms, created.ms), target: '<= 1.1x', met: yes(splitCreated.ms <= 1.1 * created.ms) },
      { figure: '  … worker vs raw boot', kiste: fmtS(splitCreated.ms), raw: fmtS(rawBootMs), ratio: fmtRatio(splitCreated.ms, rawBootMs), target: '<= 1.2x raw', met: yes(splitCreated.ms <= 1.2 * rawBootMs) },
      { figure: 'exec `true` p50, worker vs in-process', kiste: fmtMs(splitP50), raw: fmtMs(splitInP50), ratio: fmtRatio(splitP50, splitInP50), target: '<= 1.1x', met: yes(splitP50 <= 1.1 * splitInP50) },
      { figure: 'exec `true` p99, worker vs in-process', kiste: fmtMs(percentile(splitExecMs, 0.99)), raw: fmtMs(percentile(splitInProcessExecMs, 0.99)), ratio: fmtRatio(percentile(splitExecMs, 0.99), percentile(splitInProcessExecMs, 0.99)), target: '(report)', met: 'n/a' },
      { figure: `exec stdout ${STREAM_MIB} MiB, worker vs in-process`, kiste: `${splitMBps.toFixed(1)} MB/s`, raw: `${splitInProcessMBps.toFixed(1)} MB/s`, ratio: fmtRatio(splitMBps, splitInProcessMBps), target: '(report)', met: 'n/a' },
    ];
    const list = (values: number[], digits = 0) => values.map((v) => v.toFixed(digits)).join(' ');
    const cpu = cpus()[0]?.model.trim() ?? 'unknown CPU';
    const lines: string[] = [];
    lines.push(`machine: ${availableParallelism()} cores (${cpu}), ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}; accelerator ${accelerator}; other kiste QEMUs on the host at start: ${othersAtStart}, at the end: ${listQemuProcesses().filter((p) => !p.pidFile?.startsWith(workDir + '/')).length}`);
    lines.push(`guest: minimal image ${image.version}, ${VCPU} vCPU, ${MEMORY_MIB} MiB RAM (file-backed: ${fileBacked}), disks ${DISK_MIB} and ${BIG_DISK_MIB} MiB virtual`);
    lines.push(`HTTP: kiste in this process on a listening socket; client in a worker thread, one keep-alive connection; NDJSON read to 'completed', output base64-decoded`);
    lines.push('');
    lines.push(table(rows));
    lines.push('');
    lines.push('through the worker (the process split; the raw column is the in-process service, measured in the same run):');
    lines.push(table(splitRows));
    lines.push('');
    lines.push('notes:');
    lines.push(`- ratio = kiste / raw (for MB/s below 1 is slower). Boots run alone; exec, sessions and fork disk alternate raw and kiste so both see the same noise.`);
    lines.push(`- create: raw = QEMU boot until the agent says ready with SSH listening (agent's first answer at ${fmtS(rawHelloMs)}). A create also personalises the guest; new SSH host keys (ssh-keygen -A in the guest) + sshd restart took ${fmtS(rawPersonaliseMs)} on the raw machine.`);
    lines.push(`- stop (median of ${SESSION_ROUNDS}; s: ${list(stopMs.map((v) => v / 1000), 2)}) vs raw saveMemory (median of ${rawSaveMs.length}; s: ${list(rawSaveMs.map((v) => v / 1000), 2)}). kiste saves durable (fsync of the state file and the RAM file), raw with the defaults (no fsync). State: raw ${rawStateBytes} bytes, kiste ${stateBytes} bytes.`);
    lines.push(`- resume (median of ${SESSION_ROUNDS}; s: ${list(resumeMs.map((v) => v / 1000), 2)}; <= 1 s: ${yes(resume <= 1000)}) vs raw restoreMemory until the agent answers (s: ${list(rawRestoreMs.map((v) => v / 1000), 2)}; QEMU restore alone ${list(rawRestoreQemuMs.map((v) => v / 1000), 2)}, agent hello at ${list(rawRestoreHelloMs.map((v) => v / 1000), 2)}). kiste also sets the guest clock and re-personalises (no new host keys).`);
    lines.push(`- create from boot snapshot (median of ${INSTANT_ROUNDS}; s: kiste ${list(snapshotCreateMs.map((v) => v / 1000), 2)}, raw ${list(rawSnapshotMs.map((v) => v / 1000), 2)}): raw = overlay on the snapshot disk, RAM and state copies, restoreMemory, disk grown, personalise with new host keys and the restored renewals, clock set, until ready (not jailed, no database). The snapshot itself took ${fmtS(snapshot ? Number(JSON.parse(readFileSync(join(snapshot.dir, 'snapshot.json'), 'utf8')).made_in_ms) : NaN)} to make (a template boot, in the background).`);
    lines.push(`- fork with memory (median of ${INSTANT_ROUNDS}; s: kiste ${list(forkMemoryMs.map((v) => v / 1000), 2)}, raw ${list(rawForkMemoryMs.map((v) => v / 1000), 2)}; source paused ms: kiste ${list(forkPausedMs)}, raw ${list(rawForkPausedMs)}).`);
    lines.push(`- fork disk: medians of ${FORK_REPEATS} (ms, ${DISK_MIB} MiB: ${list(forkDiskMs[DISK_MIB]!)}; ${BIG_DISK_MIB} MiB: ${list(forkDiskMs[BIG_DISK_MIB]!)}); raw overlay (ms, ${list(rawOverlayMs[DISK_MIB]!)}; ${list(rawOverlayMs[BIG_DISK_MIB]!)}). Independent of the disk size: ${yes(sizeIndependent)}. These rows are the fork target.`);
    lines.push(`- fork, whole POST: the source keeps running while the copy boots; raw = raw boot + overlay. Not the fork target.`);
    lines.push(`- exec true: ${EXEC_RUNS} runs each after ${EXEC_WARMUP} warm-up; kiste min/max ${fmtMs(Math.min(...execMs))} / ${fmtMs(Math.max(...execMs))}, raw min/max ${fmtMs(Math.min(...rawExecMs))} / ${fmtMs(Math.max(...rawExecMs))}.`);
    lines.push(`- through the worker: a second service on SQLite whose machines run in a supervised kiste-worker (npm start's default), boot snapshots off; its create booted alone, just before the in-process one and in the same state (the raw machine saved, no other machine running, no boot snapshot's template booting), and its machine was stopped with its session until the exec rows; exec alternated raw (p50 ${fmtMs(percentile(splitRawExecMs, 0.5))}), in-process and through the worker in batches of ${EXEC_BATCH}; one ${STREAM_MIB} MiB stream each.`);
    lines.push(`- exec stdout: median of ${STREAM_RUNS} (MB/s, kiste ${list(streamMBps, 1)}; raw ${list(rawMBps, 1)}); kiste's stream had ${streamLines} NDJSON lines. The same command writing to /dev/null in the guest (no transport): ${guestOnlyMBps.toFixed(1)} MB/s.`);
    process.stdout.write(lines.join('\n') + '\n');
  } catch (error) {
    failed = true;
    console.error('bench failed:', error instanceof Error ? error.stack : error);
  } finally {
    log('cleaning up');
    try {
      await raw.machine?.kill();
      if (services) {
        for (const id of await services.machineHost.knownMachineIds()) await services.machineHost.destroy(id).catch((e: unknown) => log(`destroy ${id}: ${String(e)}`));
        services.compute.inProcess!.machineHost.detachAll();
      }
      await splitClient?.close();
      await stopSplit?.();
      if (server) await close(server);
      await client?.close();
      await database?.close();
    } catch (error) {
      failed = true;
      console.error('cleanup failed:', error instanceof Error ? error.stack : error);
    }
    const left = listQemuProcesses().filter((p) => p.pidFile?.startsWith(workDir + '/'));
    for (const p of left) {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    rmSync(workDir, { recursive: true, force: true });
    if (left.length > 0) {
      failed = true;
      console.error(`bench: ${left.length} QEMU process(es) of this run were still running after cleanup and were killed: ${left.map((p) => p.pid).join(', ')}`);
    } else {
      log(`no QEMU of this run left (${listQemuProcesses().length} other kiste QEMU running on the host); ${workDir} removed`);
    }
  }
  if (failed) process.exitCode = 1;
}

/** The `instance.running` event of an instance (its data says how it started). */
async function runningEvent(client: HttpClient, instanceId: string): Promise<{ data?: unknown } | undefined> {
  const events = await client.expect(200, 'GET', '/v1/events?tail=200');
  return (events.body.data as Array<{ type: string; resource_id: string; data?: unknown }>).find((e) => e.type === 'instance.running' && e.resource_id === instanceId);
}

/** A lifecycle call: 200 when it finished in time; after a 202 the instance is polled to its end. */
async function lifecycle(client: HttpClient, method: string, path: string, body: unknown, until: 'stopped' | 'running' | 'deleted'): Promise<HttpResult> {
  const started = performance.now();
  const answer = await client.one(method, path, body);
  if (answer.status === 200) return answer;
  if (answer.status !== 202) throw new Error(`${method} ${path}: ${answer.status} ${JSON.stringify(answer.body)}`);
  const instancePath = path.replace(/\/(stop|resume)$/, '');
  for (;;) {
    if (ms(started) > 300_000) throw new Error(`${method} ${path}: not ${until} after 300 s`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const now = await client.one('GET', instancePath);
    if (until === 'deleted' ? now.status === 404 : now.status === 200 && now.body.status === until && !now.body.operation) {
      return { ...now, ms: ms(started) };
    }
    if (now.status === 200 && now.body.status === 'error') throw new Error(`${method} ${path}: instance went to error: ${JSON.stringify(now.body)}`);
  }
}

const othersAtStart = listQemuProcesses().length;

main().catch((error: unknown) => {
  console.error('bench failed:', error instanceof Error ? error.stack : error);
  process.exitCode = 1;
});

/** Drops the ready boot snapshots of a configuration in an image version's folder (the next create of it boots cold). */
function forgetBootSnapshots(versionDir: string, shape: { vcpu: number; memoryMib: number }): void {
  const root = join(versionDir, 'boot-snapshots');
  if (!existsSync(root)) return;
  for (const key of readdirSync(root)) {
    const manifestFile = join(root, key, 'snapshot.json');
    try {
      const manifest = JSON.parse(readFileSync(manifestFile, 'utf8')) as { vcpu: number; memory_mib: number };
      if (manifest.vcpu === shape.vcpu && manifest.memory_mib === shape.memoryMib) rmSync(manifestFile);
    } catch {
      // not a ready snapshot
    }
  }
}

