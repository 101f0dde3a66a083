// exec stdout throughput benchmark:   npm run bench:exec
//
// One machine on the minimal image (built or refreshed first in $KISTE_IMAGE_DIR, default
// /tmp/kiste-image-cache), kiste in this process on SQLite with a real listening socket, an account,
// an API key. The command is `head -c 64M /dev/zero` (BENCH_EXEC_MIB) and every path is timed on the
// same guest, alternating, two warm-up rounds and then medians of BENCH_EXEC_RUNS (5):
//
//   figure        what                                                          clock
//   kiste         POST /v1/instances/{name}/exec, NDJSON read by a client in    host: request sent → `completed` line
//                 a worker thread (its own event loop), every output line
//                 parsed and its base64 decoded
//   agent         the service's own agent client (machineHost.agent): the       host: exec.start sent → exit event
//                 virtio-serial channel and the guest agent, no HTTP, no domain
//   guest pipe    `head … | cat > /dev/null` in the guest: what a pipe between  guest: date +%s%N around the pipeline
//                 two programs carries on this emulated CPU (no agent)
//   guest alone   `head … > /dev/null` in the guest: the producer by itself     guest: the same
//   agent, 1 MiB  as agent, the command's stdout pipe grown from 64 KiB to 1 MiB  host, as agent
//   pipe          first (perl's fcntl F_SETPIPE_SZ, then exec): does the pipe's
//                 size limit the agent?
//
// Beside the rates: this process's CPU time per run (the service, the HTTP client's worker thread and
// the AgentClient all run here) and the guest agent's CPU time (its /proc stat, user + system), so
// that a slower figure can be told from a busier host (the host has few cores and QEMU's emulated
// CPUs need them too).
//
// Target: kiste >= 50 MB/s (docs/machines.md). The fair yardsticks are the agent (what the service adds:
// kiste / agent) and the guest pipe (what any reader of a pipe gets in this guest: agent / guest pipe).
// Settings: BENCH_EXEC_MIB (64), BENCH_EXEC_RUNS (5), KISTE_ACCELERATOR (auto: probed).
import { mkdtempSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import type { GuestAgent } from '../src/compute/guest-agent';
import { listQemuProcesses } from '../src/compute/qemu';
import type { Database } from '../src/db/database';
import type { Services } from '../src/services';
import { close, listen, log, startBenchService, removeWorkDir } from './bench/support';

const MIB = 1024 * 1024;
const SIZE_MIB = Number(process.env.BENCH_EXEC_MIB ?? 64);
const RUNS = Number(process.env.BENCH_EXEC_RUNS ?? 5);
const WARMUP = 2;
const NAME = 'bench-exec';
const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 bench@kiste';

const PIPE_1MIB = ['perl', '-e', 'fcntl(STDOUT, 1031, 1048576) or die "F_SETPIPE_SZ: $!"; exec @ARGV or die "exec: $!"'];

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const mbps = (bytes: number, ms: number) => bytes / 1e6 / (ms / 1000);

// The HTTP client runs in a worker thread, as plain JavaScript, so that reading and decoding the
// stream does not share an event loop with the service it measures.
const CLIENT_SOURCE = `
const { parentPort } = require('node:worker_threads');
const http = require('node:http');
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const now = () => Number(process.hrtime.bigint()) / 1e6;
parentPort.on('message', ({ url, token, body }) => {
  const payload = Buffer.from(JSON.stringify(body));
  const started = now();
  const req = http.request(url, { method: 'POST', agent, headers: { authorization: 'Bearer ' + token, 'content-type': 'application/json', 'content-length': payload.length } }, (res) => {
    let pending = '';
    let stdoutBytes = 0;
    let lines = 0;
    let last = null;
    let doneMs = null;
    let clientMs = 0;
    res.setEncoding('utf8');
    res.on('data', (text) => {
      const begun = now();
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
      clientMs += now() - begun;
    });
    res.on('end', () => parentPort.postMessage({ status: res.statusCode, ms: doneMs ?? now() - started, last, stdoutBytes, lines, clientMs }));
    res.on('error', (error) => parentPort.postMessage({ error: String(error) }));
  });
  req.on('error', (error) => parentPort.postMessage({ error: String(error) }));
  req.end(payload);
});
`;

interface StreamResult {
  status: number;
  ms: number;
  last: { type?: string; exit_code?: number } | null;
  stdoutBytes: number;
  lines: number;
  /** Time the client spent splitting, parsing and decoding lines (synchronous code: its CPU time). */
  clientMs: number;
  error?: string;
}

function httpExec(worker: Worker, url: string, token: string, argv: string[]): Promise<StreamResult> {
  return new Promise((resolve, reject) => {
    worker.once('message', (result: StreamResult) => (result.error ? reject(new Error(`HTTP client: ${result.error}`)) : resolve(result)));
    worker.postMessage({ url, token, body: { argv } });
  });
}

async function agentExec(agent: GuestAgent, argv: string[]): Promise<{ ms: number; stdoutBytes: number; stdout: string }> {
  const started = performance.now();
  const handle = await agent.exec({ argv });
  let stdoutBytes = 0;
  const head: Buffer[] = []; // the first 4 KiB or so, for the small answers read back
  for await (const chunk of handle) {
    if (chunk.stream !== 'stdout') continue;
    if (stdoutBytes < 4096) head.push(chunk.data);
    stdoutBytes += chunk.data.length;
  }
  const exit = await handle.exit;
  if (exit.exit_code !== 0) throw new Error(`${argv.join(' ')}: exit ${exit.exit_code}`);
  return { ms: performance.now() - started, stdoutBytes, stdout: Buffer.concat(head).toString() };
}

/** Runs `pipeline` in the guest between two clock readings; answers the guest's own milliseconds. */
async function guestTimed(agent: GuestAgent, pipeline: string): Promise<number> {
  const script = `a=$(date +%s%N); ${pipeline}; b=$(date +%s%N); echo $(( (b - a) / 1000 ))`;
  const { stdout } = await agentExec(agent, ['sh', '-c', script]);
  const micros = Number(stdout.trim());
  if (!Number.isFinite(micros) || micros <= 0) throw new Error(`guest clock: ${JSON.stringify(stdout)}`);
  return micros / 1000;
}

async function main(): Promise<void> {
  const workDir = mkdtempSync(join(tmpdir(), 'kiste-bench-exec-'));
  let database: Database | undefined;
  let services: Services | undefined;
  let server: Server | undefined;
  let worker: Worker | undefined;
  let failed = false;
  try {
    server = createServer();
    const base = await listen(server);
    const started = await startBenchService({ profile: 'minimal', workDir, server, base });
    ({ services, database } = started);
    const account = await services.accounts.create('bench-exec@example.com', 'benchmark password', 'Bench');
    const { token } = await services.apiTokens.create(account.id, 'bench', 3600);
    log('kiste: creating the machine (minimal image, 2 vCPU, 1024 MiB)');
    const instance = await services.instances.create(account.id, { name: NAME, vcpu: 2, memoryMib: 1024, diskMib: 4096, sshPublicKey: SSH_KEY });
    const agent = services.machineHost.agent(instance.id);
    worker = new Worker(CLIENT_SOURCE, { eval: true });
    const url = `${base}/v1/instances/${NAME}/exec`;

    const bytes = SIZE_MIB * MIB;
    const argv = ['head', '-c', `${SIZE_MIB}M`, '/dev/zero'];
    const agentPid = (await agentExec(agent, ['systemctl', 'show', '--property', 'MainPID', '--value', 'kiste-agent'])).stdout.trim();
    /** The guest agent's CPU seconds so far (user + system, from its /proc stat); NaN if it is gone (restarted). */
    const agentCpu = async () => {
      const stat = await agentExec(agent, ['cat', `/proc/${agentPid}/stat`]).catch(() => null);
      const fields = stat?.stdout.split(') ')[1]?.split(' ') ?? [];
      return (Number(fields[11]) + Number(fields[12])) / 100;
    };
    const hostCpu = () => {
      const used = process.cpuUsage();
      return (used.user + used.system) / 1e6;
    };
    type Key = 'kiste' | 'agent' | 'big' | 'pipe' | 'alone';
    type Sample = { rate: number; hostCpu?: number; guestCpu?: number; clientCpu?: number };
    /** A transfer through the agent, with this process's and the guest agent's CPU time around it. */
    const measured = async (transfer: () => Promise<{ ms: number; clientMs?: number }>): Promise<Sample> => {
      const guest0 = await agentCpu();
      const host0 = hostCpu();
      const { ms, clientMs } = await transfer();
      const host = hostCpu() - host0;
      return { rate: mbps(bytes, ms), hostCpu: host, guestCpu: (await agentCpu()) - guest0, clientCpu: (clientMs ?? 0) / 1000 };
    };
    const samples: Record<Key, Sample[]> = { kiste: [], agent: [], big: [], pipe: [], alone: [] };
    let lines = 0;
    const steps: [Key, () => Promise<Sample>][] = [
      ['kiste', () => measured(async () => {
        const r = await httpExec(worker!, url, token, argv);
        if (r.status !== 200 || r.last?.type !== 'completed' || r.stdoutBytes !== bytes) throw new Error(`kiste exec: ${r.status}, ${r.stdoutBytes} bytes, last line ${JSON.stringify(r.last)}`);
        lines = r.lines;
        return r;
      })],
      ['agent', () => measured(async () => {
        const r = await agentExec(agent, argv);
        if (r.stdoutBytes !== bytes) throw new Error(`agent exec: ${r.stdoutBytes} bytes`);
        return r;
      })],
      ['big', () => measured(async () => {
        const r = await agentExec(agent, [...PIPE_1MIB, ...argv]);
        if (r.stdoutBytes !== bytes) throw new Error(`agent exec, 1 MiB pipe: ${r.stdoutBytes} bytes`);
        return r;
      })],
      ['pipe', async () => ({ rate: mbps(bytes, await guestTimed(agent, `${argv.join(' ')} | cat > /dev/null`)) })],
      ['alone', async () => ({ rate: mbps(bytes, await guestTimed(agent, `${argv.join(' ')} > /dev/null`)) })],
    ];
    /** One round; odd rounds run the steps in reverse order, so neither path always follows the same one. */
    const round = async (index: number) => {
      const result = {} as Record<Key, Sample>;
      for (const [key, step] of index % 2 === 0 ? steps : [...steps].reverse()) result[key] = await step();
      return result;
    };
    const others = () => `${listQemuProcesses().filter((p) => p.machineId !== instance.id).length}, load ${readFileSync('/proc/loadavg', 'utf8').split(' ')[0]}`;
    const show = (r: Record<Key, Sample>) =>
      `kiste ${r.kiste.rate.toFixed(1)}, agent ${r.agent.rate.toFixed(1)}, agent 1 MiB pipe ${r.big.rate.toFixed(1)}, guest pipe ${r.pipe.rate.toFixed(1)}, ` +
      `guest alone ${r.alone.rate.toFixed(1)} MB/s; host CPU kiste ${r.kiste.hostCpu!.toFixed(2)} (client ${r.kiste.clientCpu!.toFixed(2)}) / agent ${r.agent.hostCpu!.toFixed(2)} s; ` +
      `guest agent CPU ${r.kiste.guestCpu!.toFixed(2)} / ${r.agent.guestCpu!.toFixed(2)} s; other QEMUs on the host: ${others()}`;
    // The agent's code runs faster once V8 has optimised it (slowly, on an emulated CPU): two rounds first.
    for (let i = 0; i < WARMUP; i++) log(`warm-up ${i + 1}/${WARMUP} (not counted): ${show(await round(1))}`);
    for (let i = 0; i < RUNS; i++) {
      const r = await round(i);
      for (const key of Object.keys(samples) as Key[]) samples[key].push(r[key]);
      log(`run ${i + 1}/${RUNS}: ${show(r)}`);
    }
    const m = (key: Key, field: keyof Sample = 'rate') => median(samples[key].map((sample) => sample[field]!));
    const runs = (key: Key) => `(runs: ${samples[key].map((v) => v.rate.toFixed(1)).join(' ')})`;
    const row = (label: string, key: Key, note = '') => console.log(`  ${label.padEnd(40)}${m(key).toFixed(1).padStart(6)} MB/s   ${runs(key)}${note}`);
    console.log('');
    console.log(`exec stdout, \`${argv.join(' ')}\`, medians of ${RUNS} (accelerator ${started.accelerator})`);
    row('kiste: POST /exec, NDJSON + base64', 'kiste', `   ${lines} NDJSON lines`);
    row('agent: AgentClient on the port', 'agent');
    row('agent, stdout pipe grown to 1 MiB', 'big');
    row('guest: head | cat > /dev/null', 'pipe');
    row('guest: head > /dev/null', 'alone');
    console.log(`  ratio kiste / agent                       ${(m('kiste') / m('agent')).toFixed(2)}`);
    console.log(`  ratio agent / guest pipe                  ${(m('agent') / m('pipe')).toFixed(2)}`);
    console.log(`  host CPU per run, kiste / agent           ${m('kiste', 'hostCpu').toFixed(2)} / ${m('agent', 'hostCpu').toFixed(2)} s   (this process: service, client, AgentClient)`);
    console.log(`    of which kiste's client                 ${m('kiste', 'clientCpu').toFixed(2)} s   (splitting, JSON.parse, base64 decode in the worker)`);
    console.log(`  guest agent CPU per run, kiste / agent    ${m('kiste', 'guestCpu').toFixed(2)} / ${m('agent', 'guestCpu').toFixed(2)} s`);
    console.log(`  target kiste >= 50 MB/s                   ${m('kiste') >= 50 ? 'met' : 'NOT met'}`);
  } catch (error) {
    failed = true;
    console.error(`bench failed: ${error instanceof Error ? error.stack : String(error)}`);
  } finally {
    log('cleaning up');
    await worker?.terminate();
    if (services) for (const id of await services.machineHost.knownMachineIds()) await services.machineHost.destroy(id).catch(() => undefined);
    if (server) await close(server);
    await services?.compute.stop().catch(() => undefined);
    await database?.close();
    if (!removeWorkDir(workDir)) failed = true;
  }
  process.exit(failed ? 1 : 0);
}

void main();
