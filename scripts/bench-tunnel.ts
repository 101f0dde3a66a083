// SSH tunnel throughput benchmark:   npm run bench:tunnel
//
// One machine on the minimal image (built or refreshed first in $KISTE_IMAGE_DIR, default
// /tmp/kiste-image-cache), kiste in this process on SQLite with a real listening socket (WebSocket
// upgrades served as in production), an account, an API key.
//
//   figure     kiste                                       yardstick (same run, same guest, same sshd, same file)
//   download   scp of a file from the guest with the       scp with the same options straight to the guest's sshd,
//              system's OpenSSH, ProxyCommand = `kiste     no kiste in the path: a QEMU user-net port forward on
//              tunnel %h`, the CLI as a user has it        loopback (127.0.0.1:<free port> → guest :22), added to
//              (installed by this service's /install.sh)   the running machine for this run only (below)
//   extra      a plain TCP stream of the same file from a guest port to this process through the agent
//              (tcp.open): the tunnel's transport without SSH
//
// The direct path, only here: the production command line has no hostfwd (nothing of a guest
// listens on host ports), so the bench adds one with QMP `human-monitor-command hostfwd_add net0 …`
// on the service's own monitor connection (QEMU serves one QMP client at a time) and removes it at
// the end. The machine's QEMU runs as its jail user, whose packets to the host's own addresses the
// machines' nftables table drops; the forward's replies come from that user's socket, so the bench
// inserts one rule into that table that accepts exactly them (that uid, source port = the forward,
// to 127.0.0.1), puts it back if a service start reloaded the table, and deletes it at the end.
//
// The file is random bytes written in the guest first. Each round runs the three downloads and the
// two `ssh … true` (connection setup), in alternating order; one warm-up round, then medians.
// Target: tunnel / direct sshd >= 0.8. Settings: BENCH_TUNNEL_MIB (32), BENCH_TUNNEL_RUNS (5, after one warm-up round),
// BENCH_TUNNEL_SSH_OPTIONS (extra ssh/scp options for both paths, e.g. "-c aes128-gcm@openssh.com").
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createServer as createTcpServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { listQemuProcesses, type QmpClient } from '../src/compute/qemu';
import { HumanMonitorShape } from '../src/compute/qemu/qmp-shapes';
import { pollUntil } from '../src/compute/qemu/wait';
import type { Database } from '../src/db/database';
import { sshHostKeyOf } from '../src/domain/ssh-host-key';
import type { Services } from '../src/services';
import { close, listen, log, startBenchService, removeWorkDir } from './bench/support';

const MIB = 1024 * 1024;
const SIZE_MIB = Number(process.env.BENCH_TUNNEL_MIB ?? 32);
const RUNS = Number(process.env.BENCH_TUNNEL_RUNS ?? 5);
const NAME = 'bench-tunnel';
const GUEST_PORT = 9099;
const TARGET = 0.8;

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

function run(file: string, args: string[], env: NodeJS.ProcessEnv = process.env): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { maxBuffer: 1024 * 1024, env }, (error, stdout, stderr) => (error ? reject(new Error(`${file} failed: ${String(stderr).trim() || error.message}`)) : resolve(String(stdout))));
  });
}

/** The CLI as /install.sh installs it (the one-file bundle and its launcher), into workDir. */
async function installCli(base: string, workDir: string): Promise<string> {
  const script = join(workDir, 'install.sh');
  const response = await fetch(`${base}/install.sh`);
  if (!response.ok) throw new Error(`GET /install.sh: ${response.status}`);
  writeFileSync(script, await response.text());
  const prefix = join(workDir, 'prefix');
  await run('sh', [script], { ...process.env, KISTE_PREFIX: prefix });
  log(`kiste CLI installed by /install.sh in ${prefix}`);
  return join(prefix, 'bin', 'kiste');
}

/** A loopback port nothing listens on right now. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createTcpServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => (address && typeof address === 'object' ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/**
 * The bench's own way to the guest's sshd without kiste: a user-net port forward on loopback, added
 * to the running machine, and the one firewall rule its replies need (see the header).
 */
class DirectSsh {
  private readonly comment: string;

  private constructor(
    private readonly qmp: QmpClient,
    readonly port: number,
    private readonly table: string,
    private readonly uid: number,
  ) {
    this.comment = `kiste bench-tunnel ${process.pid} ${port}`;
  }

  static async open(services: Services, machineId: string): Promise<DirectSsh> {
    // The service's monitor connection: QEMU answers one QMP client at a time, and it is the service's.
    const running = (services.machineHost as unknown as { running?: Map<string, { qmp?: QmpClient }> }).running;
    const qmp = running?.get(machineId)?.qmp;
    if (!qmp) throw new Error('no QMP connection of the machine host to add the port forward with (has QemuMachineHost.running changed?)');
    const qemu = listQemuProcesses().find((p) => p.machineId === machineId);
    if (!qemu) throw new Error(`no QEMU process for machine ${machineId}`);
    const uidLine = readFileSync(`/proc/${qemu.pid}/status`, 'utf8').split('\n').find((line) => line.startsWith('Uid:'));
    const uid = Number(uidLine?.split(/\s+/)[1]);
    if (!Number.isInteger(uid)) throw new Error(`cannot read the uid of QEMU ${qemu.pid}`);
    const port = await freePort();
    const answer = await qmp.execute('human-monitor-command', { 'command-line': `hostfwd_add net0 tcp:127.0.0.1:${port}-:22` }, { result: HumanMonitorShape });
    if (answer.trim()) throw new Error(`hostfwd_add: ${answer.trim()}`);
    // The table of the machines' egress rules, named as src/compute/jail/machine-jail.ts names it.
    const direct = new DirectSsh(qmp, port, `kiste_${services.config.machineUidBase}`, uid);
    await direct.ensureRule();
    log(`direct: 127.0.0.1:${port} → guest :22 (hostfwd_add on the running QEMU, running as uid ${uid})`);
    return direct;
  }

  /** Puts the rule back when it is missing (a service start elsewhere reloads the whole table); true when it had to. */
  async ensureRule(): Promise<boolean> {
    if ((await this.ruleHandles()).length > 0) return false;
    await run('nft', ['insert', 'rule', 'inet', this.table, 'machines', 'meta', 'skuid', String(this.uid), 'ip', 'daddr', '127.0.0.1', 'tcp', 'sport', String(this.port), 'accept', 'comment', `"${this.comment}"`]);
    return true;
  }

  async close(): Promise<void> {
    await this.qmp.execute('human-monitor-command', { 'command-line': `hostfwd_remove net0 tcp:127.0.0.1:${this.port}` }).catch(() => undefined);
    for (const handle of await this.ruleHandles().catch(() => [])) {
      await run('nft', ['delete', 'rule', 'inet', this.table, 'machines', 'handle', handle]).catch(() => undefined);
    }
  }

  private async ruleHandles(): Promise<string[]> {
    const listing = await run('nft', ['-a', 'list', 'chain', 'inet', this.table, 'machines']);
    return listing
      .split('\n')
      .filter((line) => line.includes(`"${this.comment}"`))
      .map((line) => /# handle (\d+)/.exec(line)?.[1])
      .filter((handle): handle is string => handle !== undefined);
  }
}

async function main(): Promise<void> {
  const workDir = mkdtempSync(join(tmpdir(), 'kiste-bench-tunnel-'));
  let database: Database | undefined;
  let services: Services | undefined;
  let server: Server | undefined;
  let direct: DirectSsh | undefined;
  let failed = false;
  try {
    // Listening first: the installer names the address it was served from (KISTE_BASE_URL).
    server = createServer();
    const base = await listen(server);
    const started = await startBenchService({ profile: 'minimal', workDir, server, base });
    ({ services, database } = started);
    const account = await services.accounts.create('bench-tunnel@example.com', 'benchmark password', 'Bench');
    const { token } = await services.apiTokens.create(account.id, 'bench', 3600);
    const kisteCli = await installCli(base, workDir);

    const identity = join(workDir, 'id_ed25519');
    await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'bench', '-f', identity]);
    log('kiste: creating the machine (minimal image, 2 vCPU, 1024 MiB)');
    const instance = await services.instances.create(account.id, {
      name: NAME, vcpu: 2, memoryMib: 1024, diskMib: 4096, sshPublicKey: readFileSync(`${identity}.pub`, 'utf8').trim(),
    });
    const agent = services.machineHost.agent(instance.id);
    const knownHosts = join(workDir, 'known_hosts');
    const hostKey = sshHostKeyOf(await services.instances.get(account.id, NAME));
    writeFileSync(knownHosts, `${hostKey.knownHostsLine}\n`);

    log(`guest: writing ${SIZE_MIB} MiB of random bytes to /root/big.bin and serving it on port ${GUEST_PORT}`);
    const prepared = await agent.run({ argv: ['sh', '-c', `head -c ${SIZE_MIB}M /dev/urandom > /root/big.bin && sync`] });
    if (prepared.exit_code !== 0) throw new Error(`guest: ${prepared.stderr.toString()}`);
    const serve = `require('net').createServer((s) => require('fs').createReadStream('/root/big.bin').pipe(s)).listen(${GUEST_PORT}, '127.0.0.1')`;
    await agent.run({ argv: ['sh', '-c', `nohup node -e "${serve}" >/dev/null 2>&1 &`] });
    // Node starts slowly on an emulated CPU: wait until the port takes connections.
    const listening = await pollUntil(async () => {
      const probe = await agent.openTcp(GUEST_PORT).catch(() => null);
      probe?.destroy();
      return probe ? true : undefined;
    }, 60_000, 250);
    if (!listening) throw new Error(`guest: nothing listens on port ${GUEST_PORT} after 60 s`);
    direct = await DirectSsh.open(services, instance.id);

    // Both paths: the same client, key, known host entry (by alias), cipher and extra options.
    const common = [
      '-F', '/dev/null', '-i', identity, '-o', 'IdentitiesOnly=yes', '-o', 'BatchMode=yes', '-q',
      '-o', `UserKnownHostsFile=${knownHosts}`, '-o', 'StrictHostKeyChecking=yes', '-o', `HostKeyAlias=${hostKey.alias}`,
      ...(process.env.BENCH_TUNNEL_SSH_OPTIONS ?? '').split(' ').filter(Boolean),
    ];
    const paths = {
      tunnel: { ssh: [...common, '-o', `ProxyCommand=${kisteCli} --url ${base} --token ${token} tunnel %h`], scp: [] as string[], host: `root@${NAME}.kiste` },
      direct: { ssh: [...common, '-p', String(direct.port)], scp: [...common, '-P', String(direct.port)], host: 'root@127.0.0.1' },
    };
    paths.tunnel.scp = paths.tunnel.ssh;
    const target = join(workDir, 'down.bin');
    let ruleRestored = 0;

    const scp = async (path: 'tunnel' | 'direct') => {
      if (path === 'direct' && (await direct!.ensureRule())) ruleRestored += 1;
      rmSync(target, { force: true });
      const begun = performance.now();
      await run('scp', [...paths[path].scp, `${paths[path].host}:/root/big.bin`, target]);
      const seconds = (performance.now() - begun) / 1000;
      if (statSync(target).size !== SIZE_MIB * MIB) throw new Error(`scp (${path}) copied a different size`);
      return SIZE_MIB / seconds;
    };
    const setup = async (path: 'tunnel' | 'direct') => {
      const begun = performance.now();
      await run('ssh', [...paths[path].ssh, paths[path].host, 'true']);
      return (performance.now() - begun) / 1000;
    };
    const stream = async () => {
      const begun = performance.now();
      const socket = await agent.openTcp(GUEST_PORT);
      let bytes = 0;
      for await (const chunk of socket) bytes += (chunk as Buffer).length;
      if (bytes !== SIZE_MIB * MIB) throw new Error(`agent stream: ${bytes} bytes`);
      return bytes / MIB / ((performance.now() - begun) / 1000);
    };
    type Figures = { tunnel: number; direct: number; stream: number; tunnelSetup: number; directSetup: number };
    /** One round; odd rounds run the steps in reverse order, so neither path always goes first. */
    const round = async (index: number): Promise<Figures> => {
      const figures: Partial<Figures> = {};
      const steps: (() => Promise<void>)[] = [
        async () => void (figures.tunnel = await scp('tunnel')),
        async () => void (figures.direct = await scp('direct')),
        async () => void (figures.stream = await stream()),
        async () => void (figures.tunnelSetup = await setup('tunnel')),
        async () => void (figures.directSetup = await setup('direct')),
      ];
      for (const step of index % 2 === 0 ? steps : steps.reverse()) await step();
      return figures as Figures;
    };
    const others = () => `${listQemuProcesses().filter((p) => p.machineId !== instance.id).length}, load ${readFileSync('/proc/loadavg', 'utf8').split(' ')[0]}`;
    const show = (f: Figures) =>
      `scp tunnel ${f.tunnel.toFixed(1)}, scp direct ${f.direct.toFixed(1)}, agent stream ${f.stream.toFixed(1)} MiB/s; ` +
      `ssh true ${f.tunnelSetup.toFixed(2)} / ${f.directSetup.toFixed(2)} s; other QEMUs on the host: ${others()}`;
    // A first round warms every path alike (the guest's JIT, page cache, the user's systemd manager).
    log(`warm-up (not counted): ${show(await round(1))}`);
    const all: Figures[] = [];
    for (let i = 0; i < RUNS; i++) {
      all.push(await round(i));
      log(`run ${i + 1}/${RUNS}: ${show(all.at(-1)!)}`);
    }
    const of = (key: keyof Figures) => all.map((f) => f[key]);
    const m = (key: keyof Figures) => median(of(key));
    const runs = (key: keyof Figures, digits = 1) => `(runs: ${of(key).map((v) => v.toFixed(digits)).join(' ')})`;
    const ratio = m('tunnel') / m('direct');
    console.log('');
    console.log(`SSH tunnel, ${SIZE_MIB} MiB download, medians of ${RUNS} (accelerator ${started.accelerator})`);
    console.log(`  scp through the WebSocket tunnel        ${m('tunnel').toFixed(1).padStart(5)} MiB/s   ${runs('tunnel')}`);
    console.log(`  scp to the guest's sshd, no kiste       ${m('direct').toFixed(1).padStart(5)} MiB/s   ${runs('direct')}`);
    console.log(`  ratio tunnel / direct sshd               ${ratio.toFixed(2)}   target >= ${TARGET}: ${ratio >= TARGET ? 'met' : 'NOT met'}`);
    console.log(`  ssh … true, tunnel / direct              ${m('tunnelSetup').toFixed(2)} / ${m('directSetup').toFixed(2)} s   (connection setup that every scp pays)`);
    console.log(`  extra: TCP stream through the agent      ${m('stream').toFixed(1).padStart(5)} MiB/s   ${runs('stream')}   (no SSH: the tunnel's transport)`);
    if (ruleRestored > 0) console.log(`  (the direct path's firewall rule was put back ${ruleRestored} time(s): another service reloaded the table)`);
  } catch (error) {
    failed = true;
    console.error(`bench failed: ${error instanceof Error ? error.stack : String(error)}`);
  } finally {
    log('cleaning up');
    await direct?.close();
    services?.sshTunnels.closeAll();
    if (services) for (const id of await services.machineHost.knownMachineIds()) await services.machineHost.destroy(id).catch(() => undefined);
    if (server) await close(server);
    await services?.compute.stop().catch(() => undefined);
    await database?.close();
    if (!removeWorkDir(workDir)) failed = true;
  }
  process.exit(failed ? 1 : 0);
}

void main();
