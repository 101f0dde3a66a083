// The guest agent through kiste-worker against the agent itself:   npm run bench:worker
//
// One machine on the minimal image (built or refreshed first in the test image folder) made by a
// real `kiste-worker` process over worker-api.yaml. Then, in rounds on that same guest:
//
//   figure         worker                                                   raw
//   exec `true`    RemoteGuestAgents: StartExec, the signed AttachExec      an AgentClient in this process on the
//                  WebSocket, output and the end (what the control plane    machine's agent socket (what the worker
//                  will pay once it calls the worker)                       itself does, without the hop)
//   exec stream    the same with `head -c 64M /dev/zero`                    the same
//
// The agent's socket takes one client, so each round measures the worker, kills it with -9 (the
// machine keeps running: that is part of what is shown), measures raw, closes the raw client and
// starts a worker again, which adopts the machine. Medians over all rounds.
// Settings: BENCH_WORKER_ROUNDS (3), BENCH_WORKER_EXECS per round (20), BENCH_WORKER_MIB (64),
// KISTE_ACCELERATOR (auto: probed).
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildAgent } from '../agent/build';
import { buildImage } from '../images';
import { AgentClient } from '../src/compute/agent-client';
import type { GuestAgent } from '../src/compute/guest-agent';
import { listQemuProcesses } from '../src/compute/qemu';
import { machineFiles } from '../src/compute/qemu/machine-files';
import { RemoteGuestAgents } from '../src/compute/remote-guest-agents';
import { RemoteMachines } from '../src/compute/remote-machines';
import { RemoteImages } from '../src/compute/remote-images';
import { adoptedWorkerClient } from '../test/support/adopted-worker';
import { TEST_IMAGE_DIR } from '../test/support/images';
import { ServiceProcess } from '../test/support/service-process';
import { log } from './bench/support';

const ROUNDS = Number(process.env.BENCH_WORKER_ROUNDS ?? 3);
const EXECS = Number(process.env.BENCH_WORKER_EXECS ?? 20);
const STREAM_MIB = Number(process.env.BENCH_WORKER_MIB ?? 64);
const MIB = 1024 * 1024;
const SHAPE = { vcpu: 1, memoryMib: 768, diskMib: 2048 };
const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 bench@kiste';

const percentile = (values: number[], p: number) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(values.length * p))]!;
const fmtMs = (value: number) => `${value.toFixed(1)} ms`;

async function execMs(agent: GuestAgent, argv: string[]): Promise<{ ms: number; stdoutBytes: number }> {
  const started = performance.now();
  const exec = await agent.exec({ argv });
  let stdoutBytes = 0;
  for await (const chunk of exec) if (chunk.stream === 'stdout') stdoutBytes += chunk.data.length;
  const exit = await exec.exit;
  if (exit.exit_code !== 0) throw new Error(`${argv.join(' ')}: exit ${exit.exit_code}`);
  return { ms: performance.now() - started, stdoutBytes };
}

/** `EXECS` of `true` (after two warm-up runs) and one stream; their times. */
async function measure(agent: GuestAgent): Promise<{ trueMs: number[]; streamMBps: number }> {
  for (let i = 0; i < 2; i++) await execMs(agent, ['true']);
  const trueMs: number[] = [];
  for (let i = 0; i < EXECS; i++) trueMs.push((await execMs(agent, ['true'])).ms);
  const stream = await execMs(agent, ['head', '-c', `${STREAM_MIB}M`, '/dev/zero']);
  if (stream.stdoutBytes !== STREAM_MIB * MIB) throw new Error(`stream: ${stream.stdoutBytes} bytes`);
  return { trueMs, streamMBps: stream.stdoutBytes / 1e6 / (stream.ms / 1000) };
}

async function main(): Promise<void> {
  log(`image: building or refreshing the minimal image in ${TEST_IMAGE_DIR}`);
  await buildImage({ profile: 'minimal', outDir: TEST_IMAGE_DIR, agentBundle: (await buildAgent()).outfile });
  const workDir = mkdtempSync(join(tmpdir(), 'kiste-bench-worker-'));
  const dataDir = join(workDir, 'data');
  const id = randomUUID();
  let worker: ServiceProcess | null = null;
  const startWorker = async () => {
    worker = new ServiceProcess(
      { KISTE_DATA_DIR: dataDir, KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_BOOT_SNAPSHOTS: 'off', ...(process.env.KISTE_ACCELERATOR ? { KISTE_ACCELERATOR: process.env.KISTE_ACCELERATOR } : {}) },
      { entry: 'src/worker/main.ts', ready: 'kiste-worker is listening' },
    );
    await worker.listening();
    return adoptedWorkerClient(dataDir);
  };
  try {
    let client = await startWorker();
    const machines = new RemoteMachines(client);
    const current = await new RemoteImages(client).refresh('minimal');
    if (!current) throw new Error('the worker sees no minimal image');
    log('worker: creating a machine (cold boot)');
    const created = performance.now();
    await machines.create(id, current, SHAPE, { hostname: 'bench-worker', authorizedKeys: [SSH_KEY] });
    log(`worker: machine running after ${((performance.now() - created) / 1000).toFixed(1)} s`);

    const viaWorker = { trueMs: [] as number[], streamMBps: [] as number[] };
    const raw = { trueMs: [] as number[], streamMBps: [] as number[] };
    const restarts: number[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      const remote = await measure(new RemoteGuestAgents(client).agent(id));
      viaWorker.trueMs.push(...remote.trueMs);
      viaWorker.streamMBps.push(remote.streamMBps);
      const [qemu] = listQemuProcesses().filter((p) => p.machineId === id).map((p) => p.pid);
      worker!.killHard();
      await worker!.waitExit(10_000);
      if (!listQemuProcesses().some((p) => p.pid === qemu)) throw new Error('the machine did not outlive its worker');
      const socket = machineFiles(join(dataDir, 'machines', id)).agentSocket;
      const agent = new AgentClient({ connect: () => connect(socket) });
      await agent.waitConnected(30_000);
      const direct = await measure(agent);
      raw.trueMs.push(...direct.trueMs);
      raw.streamMBps.push(direct.streamMBps);
      agent.close();
      const restarted = performance.now();
      client = await startWorker();
      if (!(await new RemoteMachines(client).adopt(id))) throw new Error('the new worker did not adopt the machine');
      restarts.push(performance.now() - restarted);
      log(
        `round ${round}: exec true p50 worker ${fmtMs(percentile(remote.trueMs, 0.5))}, raw ${fmtMs(percentile(direct.trueMs, 0.5))}; ` +
          `stream worker ${remote.streamMBps.toFixed(1)} MB/s, raw ${direct.streamMBps.toFixed(1)} MB/s; worker back and adopted in ${fmtMs(restarts.at(-1)!)}`,
      );
    }

    const rows = [
      ['exec `true` p50', fmtMs(percentile(viaWorker.trueMs, 0.5)), fmtMs(percentile(raw.trueMs, 0.5)), (percentile(viaWorker.trueMs, 0.5) / percentile(raw.trueMs, 0.5)).toFixed(2) + 'x'],
      ['exec `true` p99', fmtMs(percentile(viaWorker.trueMs, 0.99)), fmtMs(percentile(raw.trueMs, 0.99)), (percentile(viaWorker.trueMs, 0.99) / percentile(raw.trueMs, 0.99)).toFixed(2) + 'x'],
      [`exec ${STREAM_MIB} MiB stdout`, `${percentile(viaWorker.streamMBps, 0.5).toFixed(1)} MB/s`, `${percentile(raw.streamMBps, 0.5).toFixed(1)} MB/s`, (percentile(viaWorker.streamMBps, 0.5) / percentile(raw.streamMBps, 0.5)).toFixed(2) + 'x'],
    ];
    console.log(`\n| figure | through kiste-worker | raw agent | worker / raw |\n|---|---|---|---|`);
    for (const row of rows) console.log(`| ${row.join(' | ')} |`);
    console.log(`\n${ROUNDS} rounds on one guest, ${EXECS} runs of \`true\` per side and round; worker killed with -9 and started again each round (adopt took p50 ${fmtMs(percentile(restarts, 0.5))}).`);
    await new RemoteMachines(client).destroy(id);
  } finally {
    for (const qemu of listQemuProcesses().filter((p) => p.machineDir?.startsWith(dataDir))) process.kill(qemu.pid, 'SIGKILL');
    await (worker as ServiceProcess | null)?.ensureStopped();
    rmSync(workDir, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.stack : error);
  process.exit(1);
});
