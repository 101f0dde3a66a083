// A machine reaches the internet and nothing of the host, on real guests (minimal image, QEMU).
// From inside a machine: the host's loopback through slirp's gateway (PostgreSQL, a listener the
// test opens on every host address), the host's own address, the metadata address and a private
// address the host itself reaches (a network namespace made here) all stay closed, while DNS and
// the package mirror work; two machines cannot reach each other. Their QEMUs run as users of their
// own (non-zero, different uids) under seccomp, in their cgroups, with their files only. A host
// that cannot jail machines refuses to start them (503 K09) and stores nothing.
import { lookup } from 'node:dns/promises';
import { lstatSync, readFileSync, statSync } from 'node:fs';
import { createServer, connect, type Server } from 'node:net';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { MEMORY_OVERHEAD_MIB } from '../../src/compute/jail/cgroups';
import { listQemuProcesses } from '../../src/compute/qemu';
import { classifyAddress } from '../../src/net/special-addresses';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { guestRun } from '../support/guest';
import { privateNetwork } from '../support/netns';
import { apiKeyFor, bearer, createAccount, startTestService, TestService } from '../support/harness';

jest.setTimeout(900_000);

const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste';
const PRIVATE_PORT = 8081;

/** A host on a private network the host itself reaches: a network namespace behind a veth pair. */
function privateTarget(): { address: string; close(): void } {
  const network = privateNetwork('iso', 31);
  network.spawn(['socat', `TCP-LISTEN:${PRIVATE_PORT},fork,reuseaddr`, 'SYSTEM:echo private-ok']);
  return network;
}

/** What the host itself gets from a TCP service (the control beside the guest's attempt). */
function readFromHost(host: string, port: number): Promise<string> {
  return new Promise((resolve) => {
    let text = '';
    const socket = connect(port, host);
    socket.setTimeout(5000, () => socket.destroy());
    socket.on('data', (data) => (text += data.toString()));
    socket.on('close', () => resolve(text));
    socket.on('error', () => resolve(text));
  });
}

/** `probe HOST PORT` in the guest: prints "HOST PORT open" or "HOST PORT closed" within 8 s. */
const PROBE = 'probe() { if timeout 8 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; then echo "$1 $2 open"; else echo "$1 $2 closed"; fi; }';

describe('machine isolation on real guests', () => {
  let t: TestService;
  let key: string;
  let listener: Server;
  let listenerPort: number;
  const reachedListener: string[] = [];
  let target: ReturnType<typeof privateTarget>;
  let mirror: string;
  const ids: Record<string, string> = {};
  const hostKeys: Record<string, string> = {};
  const hostAddress = Object.values(networkInterfaces()).flat().find((a) => a && !a.internal && a.family === 'IPv4')!.address;

  beforeAll(async () => {
    target = privateTarget();
    listener = createServer((socket) => {
      reachedListener.push(String(socket.remoteAddress));
      socket.end('host-listener');
    });
    await new Promise<void>((resolve) => listener.listen(0, '::', resolve)); // every host address, both families
    listenerPort = (listener.address() as { port: number }).port;
    // The package mirror is the "public host". Where it sits at a special address (this host's
    // network: a documentation range), the test allows it as an operator of such a network would.
    mirror = (await lookup('deb.debian.org', { family: 4 })).address;
    const allow = classifyAddress(mirror).public ? '' : `${mirror}/32`;
    await ensureTestImage();
    t = await startTestService({ env: { KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_IMAGE_PROFILE: 'minimal', KISTE_MACHINE_EGRESS_ALLOW: allow } });
    expect(await t.services.machineHost.refreshImage('minimal')).not.toBeNull();
    key = await apiKeyFor(t, await createAccount(t));
    for (const name of ['iso-a', 'iso-b']) {
      const created = await t.api.post('/v1/instances').set(bearer(key))
        .send({ profile: 'desktop', name, vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY }).expect(200);
      ids[name] = created.body.id;
      hostKeys[name] = (await t.api.get(`/v1/instances/${name}/ssh-host-key`).set(bearer(key)).expect(200)).body.public_key;
    }
  });

  afterAll(async () => {
    target?.close();
    listener?.close();
    if (!t) return;
    for (const id of await t.services.machineHost.knownMachineIds()) await t.services.machineHost.destroy(id);
    await t.close();
  });

  it('runs each QEMU as a user of its own, under seccomp, in its limits, with its files only', async () => {
    const uids = new Set<number>();
    for (const name of ['iso-a', 'iso-b']) {
      const qemu = listQemuProcesses().find((p) => p.machineId === ids[name] && p.machineDir?.startsWith(t.config.dataDir));
      expect(qemu).toBeDefined();
      const status = readFileSync(`/proc/${qemu!.pid}/status`, 'utf8');
      const field = (label: string) => new RegExp(`^${label}:[ \\t]*(.*)$`, 'm').exec(status)?.[1]?.trim().split(/\s+/).filter(Boolean);
      const [realUid, effectiveUid, savedUid] = field('Uid')!.map(Number);
      expect(realUid).toBeGreaterThan(t.config.machineUidBase);
      expect(new Set([realUid, effectiveUid, savedUid]).size).toBe(1);
      expect(field('Gid')![0]).toBe(String(t.config.machineUidBase));
      expect(field('Groups') ?? []).toEqual([]);
      expect(field('Seccomp')).toEqual(['2']);
      expect(field('NoNewPrivs')).toEqual(['1']);
      expect(field('CapEff')).toEqual(['0000000000000000']);
      uids.add(realUid!);
      // its cgroup (this host: v1 cpu and memory; elsewhere v2): kiste/<id>
      const cgroups = readFileSync(`/proc/${qemu!.pid}/cgroup`, 'utf8');
      expect(cgroups).toContain(`/kiste/${ids[name]}`);
      // and its limits: memory_mib (768) + QEMU's overhead; one vCPU + half a CPU
      const ceiling = String((768 + MEMORY_OVERHEAD_MIB) * 1048576);
      if (/^0::\/kiste\//m.test(cgroups)) {
        const group = `/sys/fs/cgroup/kiste/${ids[name]}`;
        expect(readFileSync(`${group}/memory.max`, 'utf8').trim()).toBe(ceiling);
        expect(readFileSync(`${group}/cpu.max`, 'utf8').trim()).toBe('150000 100000');
      } else {
        expect(readFileSync(`/sys/fs/cgroup/memory/kiste/${ids[name]}/memory.limit_in_bytes`, 'utf8').trim()).toBe(ceiling);
        expect(readFileSync(`/sys/fs/cgroup/cpu/kiste/${ids[name]}/cpu.cfs_quota_us`, 'utf8').trim()).toBe('150000');
      }
      // files: the run folder is root's again once the guest runs; the disk's top layer is the user's alone
      const machineDir = join(t.config.dataDir, 'machines', ids[name]!);
      expect(statSync(join(machineDir, 'run')).uid).toBe(0);
      const active = JSON.parse(readFileSync(join(machineDir, 'disk.json'), 'utf8')).active as string;
      const layer = lstatSync(join(t.config.dataDir, 'layers', active));
      expect(layer.uid).toBe(realUid);
      expect(layer.mode & 0o077).toBe(0);
    }
    expect(uids.size).toBe(2);
  });

  it('reaches DNS and the public internet, and nothing of the host or private networks', async () => {
    expect(await readFromHost(target.address, PRIVATE_PORT)).toContain('private-ok'); // the host reaches it
    expect(await readFromHost('127.0.0.1', listenerPort)).toBe('host-listener');
    const before = reachedListener.length;
    const probes = [
      ['10.0.2.2', 5432], // PostgreSQL on the host's loopback, through slirp's gateway
      ['10.0.2.2', 6379], // Redis
      ['10.0.2.2', listenerPort],
      [hostAddress, listenerPort], // the host's own address
      [hostAddress, 5432],
      ['169.254.169.254', 80], // cloud metadata
      [target.address, PRIVATE_PORT], // a private network the host reaches
      ['fec0::2', listenerPort], // slirp's IPv6 gateway: the host's ::1
    ];
    const script = `${PROBE}\n${probes.map(([host, port]) => `probe ${host} ${port} &`).join('\n')}\nprobe deb.debian.org 80 &\nwait`;
    const { stdout } = await guestRun(t, ids['iso-a']!, script);
    for (const [host, port] of probes) expect(stdout).toContain(`${host} ${port} closed`);
    expect(stdout).toContain('deb.debian.org 80 open');
    expect(reachedListener.length).toBe(before);

    const dns = await guestRun(t, ids['iso-a']!, 'getent hosts deb.debian.org');
    expect(dns.stdout).toContain(mirror);
    const http = await guestRun(t, ids['iso-a']!, 'curl -sS -o /dev/null -w "%{http_code}" --max-time 30 http://deb.debian.org/debian/dists/bookworm/Release');
    expect(http.stdout).toBe('200');
  });

  it('keeps machines apart: a guest at the other guest\'s address meets only itself', async () => {
    // Both guests are 10.0.2.15 on networks of their own; nothing of either listens on the host.
    const scan = await guestRun(t, ids['iso-a']!, 'ssh-keyscan -T 5 -t ed25519 10.0.2.15 2>/dev/null');
    const keyOf = (line: string) => line.split(' ').slice(0, 2).join(' ');
    expect(scan.stdout).toContain(keyOf(hostKeys['iso-a']!).split(' ')[1]);
    expect(scan.stdout).not.toContain(keyOf(hostKeys['iso-b']!).split(' ')[1]);
  });

  it('refuses to start machines when the host cannot jail them (K09), storing nothing', async () => {
    const problem = jest.spyOn(t.services.machineHost, 'isolationProblem').mockResolvedValue({ reason: 'nft is not installed', hint: 'Install it: apt-get install nftables' });
    try {
      const refused = await t.api.post('/v1/instances').set(bearer(key))
        .send({ profile: 'desktop', name: 'iso-c', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY }).expect(503);
      expect(refused.body.error).toMatchObject({ code: 'K09', type: 'machine_isolation_unavailable', retryable: false, hint: 'Install it: apt-get install nftables' });
      expect(refused.body.error.message).toContain('nft is not installed');
      const list = await t.api.get('/v1/instances').set(bearer(key)).expect(200);
      expect(list.body.data.map((i: { name: string }) => i.name).sort()).toEqual(['iso-a', 'iso-b']);
    } finally {
      problem.mockRestore();
    }
  });
});
