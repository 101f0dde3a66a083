// SSH tunnel throughput benchmark:   npm run bench:tunnel
//
// One machine on the minimal image (built or refreshed first in $KISTE_IMAGE_DIR, default
// /tmp/kiste-image-cache), kiste in this process on SQLite with a real listening socket (WebSocket
// upgrades served as in production), an account, an API key.
//
//   figure     kiste                                                   baseline (same run, same guest)
//   download   scp of a file from the guest with the system's OpenSSH, a plain TCP stream from a guest port to
//              ProxyCommand = `kiste tunnel %h`, the CLI as a user      this process through the agent (tcp.open)
//              has it: installed by this service's /install.sh
//
// The file is random bytes written in the guest first; the baseline port serves the same file
// (a small Node server in the guest). Runs alternate baseline and scp; medians are compared.
// Target: tunnel / direct >= 0.5. Settings: BENCH_TUNNEL_MIB (32), BENCH_TUNNEL_RUNS (5, after one warm-up round),
// BENCH_TUNNEL_SSH_OPTIONS (extra ssh/scp options, e.g. "-c aes128-gcm@openssh.com").
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { listQemuProcesses } from '../src/compute/qemu';
import { pollUntil } from '../src/compute/qemu/wait';
import type { Database } from '../src/db/database';
import { sshHostKeyOf } from '../src/domain/ssh-host-key';
import type { Services } from '../src/services';
import { close, listen, log, startBenchService } from './bench/support';

const MIB = 1024 * 1024;
const SIZE_MIB = Number(process.env.BENCH_TUNNEL_MIB ?? 32);
const RUNS = Number(process.env.BENCH_TUNNEL_RUNS ?? 5);
const NAME = 'bench-tunnel';
const GUEST_PORT = 9099;

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

function run(file: string, args: string[], env: NodeJS.ProcessEnv = process.env): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { maxBuffer: 1024 * 1024, env }, (error, _stdout, stderr) => (error ? reject(new Error(`${file} failed: ${String(stderr).trim() || error.message}`)) : resolve()));
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

async function main(): Promise<void> {
  const workDir = mkdtempSync(join(tmpdir(), 'kiste-bench-tunnel-'));
  let database: Database | undefined;
  let services: Services | undefined;
  let server: Server | undefined;
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
    writeFileSync(knownHosts, `${sshHostKeyOf(await services.instances.get(account.id, NAME)).knownHostsLine}\n`);

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

    const direct: number[] = [];
    const tunnel: number[] = [];
    const sshOptions = [
      '-F', '/dev/null', '-i', identity, '-o', 'IdentitiesOnly=yes', '-o', 'BatchMode=yes', '-q',
      '-o', `UserKnownHostsFile=${knownHosts}`, '-o', 'StrictHostKeyChecking=yes',
      '-o', `ProxyCommand=${kisteCli} --url ${base} --token ${token} tunnel %h`,
      ...(process.env.BENCH_TUNNEL_SSH_OPTIONS ?? '').split(' ').filter(Boolean),
    ];
    const setup: number[] = [];
    const target = join(workDir, 'down.bin');
    /** One round: the direct stream, then scp and `ssh true` through the tunnel. */
    const round = async () => {
      let started = performance.now();
      const stream = await agent.openTcp(GUEST_PORT);
      let bytes = 0;
      for await (const chunk of stream) bytes += (chunk as Buffer).length;
      if (bytes !== SIZE_MIB * MIB) throw new Error(`direct stream: ${bytes} bytes`);
      const directRate = bytes / MIB / ((performance.now() - started) / 1000);

      rmSync(target, { force: true });
      started = performance.now();
      await run('scp', [...sshOptions, `root@${NAME}.kiste:/root/big.bin`, target]);
      const seconds = (performance.now() - started) / 1000;
      if (statSync(target).size !== SIZE_MIB * MIB) throw new Error('scp copied a different size');
      started = performance.now();
      await run('ssh', [...sshOptions, `root@${NAME}.kiste`, 'true']);
      return { directRate, tunnelRate: SIZE_MIB / seconds, setupSeconds: (performance.now() - started) / 1000 };
    };
    // A first round warms both paths alike (the guest's JIT, page cache, the user's systemd manager).
    const warm = await round();
    log(`warm-up (not counted): direct ${warm.directRate.toFixed(1)} MiB/s, scp through the tunnel ${warm.tunnelRate.toFixed(1)} MiB/s`);
    for (let i = 0; i < RUNS; i++) {
      const { directRate, tunnelRate, setupSeconds } = await round();
      direct.push(directRate);
      tunnel.push(tunnelRate);
      setup.push(setupSeconds);
      log(`run ${i + 1}/${RUNS}: direct ${directRate.toFixed(1)} MiB/s, scp through the tunnel ${tunnelRate.toFixed(1)} MiB/s`);
    }
    const ratio = median(tunnel) / median(direct);
    console.log('');
    console.log(`SSH tunnel, ${SIZE_MIB} MiB download, medians of ${RUNS} (accelerator ${started.accelerator})`);
    console.log(`  direct TCP stream through the agent   ${median(direct).toFixed(1)} MiB/s   (runs: ${direct.map((v) => v.toFixed(1)).join(' ')})`);
    console.log(`  scp through the WebSocket tunnel      ${median(tunnel).toFixed(1)} MiB/s   (runs: ${tunnel.map((v) => v.toFixed(1)).join(' ')})`);
    console.log(`  ssh … true through the tunnel         ${median(setup).toFixed(2)} s    (connection setup that every scp pays)`);
    console.log(`  ratio tunnel / direct                 ${ratio.toFixed(2)}   target >= 0.5: ${ratio >= 0.5 ? 'met' : 'NOT met'}`);
    console.log('  (scp includes SSH key exchange, encryption in the emulated guest and the ProxyCommand process start)');
  } catch (error) {
    failed = true;
    console.error(`bench failed: ${error instanceof Error ? error.stack : String(error)}`);
  } finally {
    log('cleaning up');
    services?.sshTunnels.closeAll();
    if (services) for (const id of await services.machineHost.knownMachineIds()) await services.machineHost.destroy(id).catch(() => undefined);
    if (server) await close(server);
    await database?.close();
    rmSync(workDir, { recursive: true, force: true });
    const left = listQemuProcesses().filter((p) => p.machineDir?.startsWith(workDir));
    if (left.length > 0) {
      console.error(`QEMU left behind: ${left.map((p) => p.pid).join(' ')}`);
      failed = true;
    }
  }
  process.exit(failed ? 1 : 0);
}

void main();
