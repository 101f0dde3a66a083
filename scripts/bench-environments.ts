// Create with an environment:   npm run bench:environments
//
// How long a machine with an environment takes until it is ready to use, beside doing the same by
// hand on a machine created without one, in the same run, on the minimal image from a boot snapshot
// (made first), with the same shape. The environment: a repository served over HTTP with basic auth
// from a network namespace of its own (test/support/git-server.ts, reached through
// KISTE_MACHINE_EGRESS_ALLOW), credentials in a secret file, two variables and a short setup script.
//
//   figure              kiste                                          by hand (baseline)
//   create answered     POST /v1/instances with `environment`          POST /v1/instances without
//                       (boot + secret files and variables written)
//   files               its setup step `files`                         POST /exec writing the same files
//   clone               its setup step `clone`                         POST /exec `git clone` + checkout
//   setup script        its setup step `setup_script`                  POST /exec `bash -l` of the script
//   ready to use        until GET /setup says succeeded                the create + the three execs
//
// The rounds alternate kiste and by hand so that both see the same noise. Target: ready to use
// <= 1.2x by hand. Root is needed (network namespace, machine jail). Settings: BENCH_ROUNDS (3),
// BENCH_VCPU (1), BENCH_MEMORY_MIB (768), KISTE_ACCELERATOR (auto), KISTE_IMAGE_DIR.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { listQemuProcesses } from '../src/compute/qemu';
import { gitServer, GIT_PORT } from '../test/support/git-server';
import { close, listen, log, startBenchService } from './bench/support';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SHAPE = { vcpu: Number(process.env.BENCH_VCPU ?? 1), memory_mib: Number(process.env.BENCH_MEMORY_MIB ?? 768), disk_mib: 2048 };
const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 bench@kiste';
const SCRIPT = 'set -e\ncd /root/app\necho "$GREETING from $(cat README)"\necho done > /root/setup-marker\n';
const TARGET = 1.2;

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

interface Step { name: string; status: string; duration_ms: number }

async function main(): Promise<void> {
  const workDir = mkdtempSync(join(tmpdir(), 'kiste-bench-env-'));
  const password = `bench-${randomBytes(8).toString('hex')}`;
  const git = gitServer(password);
  const server = createServer();
  const base = await listen(server);
  const othersAtStart = listQemuProcesses().length;
  const { services, database } = await startBenchService({
    profile: 'minimal', workDir, server, base,
    env: { KISTE_BOOT_SNAPSHOTS: 'on', KISTE_MACHINE_EGRESS_ALLOW: git.cidr },
  });
  const account = await services.accounts.create(`bench-${Date.now()}@example.com`, 'bench password 123');
  const token = (await services.apiTokens.create(account.id, 'bench', 3600)).token;
  const api = async (method: string, path: string, body?: unknown): Promise<{ status: number; text: string; json: <T>() => T }> => {
    const res = await fetch(`${base}${path}`, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    if (res.status >= 400) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return { status: res.status, text, json: <T>() => JSON.parse(text) as T };
  };
  /** POST /exec until its `completed` line; the exit code must be 0. */
  const exec = async (name: string, argv: string[], env: Record<string, string> = {}): Promise<number> => {
    const started = performance.now();
    const res = await api('POST', `/v1/instances/${name}/exec`, { argv, env });
    const done = res.text.trim().split('\n').map((line) => JSON.parse(line) as { type: string; exit_code?: number }).find((line) => line.type === 'completed');
    if (!done || done.exit_code !== 0) throw new Error(`exec ${argv.join(' ')} in ${name}: ${res.text.slice(-500)}`);
    return performance.now() - started;
  };
  const create = async (name: string, environment?: string) => {
    const started = performance.now();
    const created = await api('POST', '/v1/instances', { profile: 'desktop', name, ...SHAPE, ssh_public_key: SSH_KEY, ...(environment ? { environment } : {}) });
    return { ms: performance.now() - started, instance: created.json<{ id: string }>() };
  };

  try {
    const repoUrl = `http://${git.address}:${GIT_PORT}/app.git`;
    const credentials = `http://kiste:${password}@${git.address}:${GIT_PORT}\n`;
    const variables = { GREETING: 'hello', APP_ENV: 'bench' };
    await api('POST', '/v1/environments', {
      name: 'bench',
      repositories: [{ url: repoUrl, ref: 'v1', path: '/root/app', credentials_file: '/root/.git-credentials' }],
      variables,
      secret_files: [{ path: '/root/.git-credentials', content_base64: Buffer.from(credentials).toString('base64') }],
      setup_script: SCRIPT,
    });
    log('making the boot snapshot of this shape (a template boot)');
    const snapshot = await services.compute.inProcess!.machineHost.makeBootSnapshot(services.machineHost.currentImage('minimal')!, { vcpu: SHAPE.vcpu, memoryMib: SHAPE.memory_mib });
    if (!snapshot) throw new Error('no boot snapshot was made');

    const kiste = { create: [] as number[], files: [] as number[], clone: [] as number[], script: [] as number[], ready: [] as number[] };
    const byHand = { create: [] as number[], files: [] as number[], clone: [] as number[], script: [] as number[], ready: [] as number[] };
    for (let round = 1; round <= ROUNDS; round++) {
      log(`round ${round}/${ROUNDS}: by hand`);
      const plain = await create(`hand-${round}`);
      const files = await exec(`hand-${round}`, ['sh', '-c', 'umask 077 && printf %s "$1" > /root/.git-credentials', 'sh', credentials]);
      const clone = await exec(`hand-${round}`, ['sh', '-c', 'git -c credential.helper="store --file=/root/.git-credentials" clone -q --no-checkout "$1" /root/app && git -C /root/app -c advice.detachedHead=false checkout -q v1', 'sh', repoUrl]);
      const script = await exec(`hand-${round}`, ['bash', '-l', '-c', SCRIPT], variables);
      byHand.create.push(plain.ms);
      byHand.files.push(files);
      byHand.clone.push(clone);
      byHand.script.push(script);
      byHand.ready.push(plain.ms + files + clone + script);
      await api('DELETE', `/v1/instances/hand-${round}`);

      log(`round ${round}/${ROUNDS}: kiste`);
      const started = performance.now();
      const withEnv = await create(`env-${round}`, 'bench');
      let setup: { status: string; steps: Step[]; error: string | null };
      for (;;) {
        setup = (await api('GET', `/v1/instances/env-${round}/setup`)).json<typeof setup>();
        if (setup.status === 'succeeded' || setup.status === 'failed') break;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const ready = performance.now() - started;
      if (setup.status !== 'succeeded') throw new Error(`setup of env-${round} failed: ${setup.error}`);
      const step = (name: string) => setup.steps.find((s) => s.name === name)!.duration_ms;
      kiste.create.push(withEnv.ms);
      kiste.files.push(step('files'));
      kiste.clone.push(step('clone'));
      kiste.script.push(step('setup_script'));
      kiste.ready.push(ready);
      await api('DELETE', `/v1/instances/env-${round}`);
      log(`ready to use: kiste ${seconds(ready)}, by hand ${seconds(byHand.ready.at(-1)!)}`);
    }

    const rows = [
      ['create answered', kiste.create, byHand.create, '(boot + files)'],
      ['  files', kiste.files, byHand.files, ''],
      ['  clone', kiste.clone, byHand.clone, ''],
      ['  setup script', kiste.script, byHand.script, ''],
      ['ready to use', kiste.ready, byHand.ready, `<= ${TARGET}x`],
    ] as const;
    const lines = [
      `create with an environment, minimal image from a boot snapshot, ${SHAPE.vcpu} vCPU, ${SHAPE.memory_mib} MiB; median of ${ROUNDS} rounds`,
      '',
      '| figure | kiste | by hand | ratio | target |',
      '|---|---|---|---|---|',
      ...rows.map(([figure, k, h, target]) => `| ${figure} | ${seconds(median(k))} | ${seconds(median(h))} | ${(median(k) / median(h)).toFixed(2)}x | ${target} |`),
      '',
      `ready to use within target: ${median(kiste.ready) <= TARGET * median(byHand.ready) ? 'yes' : 'NO'}`,
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    for (const id of await services.machineHost.knownMachineIds()) await services.machineHost.destroy(id).catch(() => undefined);
    await close(server);
    await services.compute.stop().catch(() => undefined);
    await database.close();
    git.close();
    rmSync(workDir, { recursive: true, force: true });
  }
  const left = listQemuProcesses().length - othersAtStart;
  if (left > 0) throw new Error(`${left} QEMU process(es) left behind`);
}

main().then(() => process.exit(0), (error: Error) => {
  process.stderr.write(`bench: ${error.stack ?? error.message}\n`);
  process.exit(1);
});
