// A machine reaches the internet and nothing of the host, on real guests (minimal image, QEMU).
// From inside a machine: the host's loopback through slirp's gateway (PostgreSQL, a listener the
// test opens on every host address), the host's own address, the metadata address and a private
// address the host itself reaches (a network namespace made here) all stay closed, while DNS and
// the package mirror work; two machines cannot reach each other. Their QEMUs run as users of their
// own (non-zero, different uids) under seccomp, in their cgroups, with their files only. A host
// that cannot jail machines refuses to start them (503 K09) and stores nothing. When kiste's
// nftables table is deleted, it is back within seconds and the machines' QEMUs are frozen until it
// is: a guest gets nothing done while the rules are missing, and reaches out again once they are back.
// Each QEMU sees only its own files (its mount namespace, read from /proc) and, as its user, only its
// own processes; a guest flooding its serial console stops at the log's cap and keeps running; a
// deleted machine's uid keeps no access to any layer, also to those a fork still uses.
import { execFileSync } from 'node:child_process';
import { lookup } from 'node:dns/promises';
import { lstatSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer, connect, type AddressInfo, type Socket } from 'node:net';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { MEMORY_OVERHEAD_MIB } from '../../src/compute/jail/cgroups';
import { HostFirewall } from '../../src/compute/jail/host-firewall';
import { egressTable } from '../../src/compute/jail/egress-rules';
import { pollUntil, sleep } from '../../src/compute/qemu/wait';
import { listQemuProcesses } from '../../src/compute/qemu';
import { classifyAddress } from '../../src/net/special-addresses';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { guestRun } from '../support/guest';
import { accessOf, mountNamespace, mountsOf, processesSeenAs, seesPath, untilSize } from '../support/jail-view';
import { SERIAL_LOG_MAX_BYTES } from '../../src/compute/jail/mount-jail';
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

/** A TCP service on every host address (both families): who reached it; close() also ends what it accepted. */
async function hostListener(): Promise<{ port: number; reached: string[]; close(): void }> {
  const reached: string[] = [];
  const accepted = new Set<Socket>();
  const server = createServer((socket) => {
    reached.push(String(socket.remoteAddress));
    accepted.add(socket);
    socket.on('close', () => accepted.delete(socket));
    socket.on('error', () => undefined);
    socket.end('host-listener');
  });
  await new Promise<void>((resolve) => server.listen(0, '::', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    reached,
    close() {
      server.close();
      for (const socket of accepted) socket.destroy(); // one whose FIN the rules drop would stay open
    },
  };
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
  let listener: Awaited<ReturnType<typeof hostListener>>;
  let listenerPort: number;
  let reachedListener: string[];
  let target: ReturnType<typeof privateTarget>;
  let mirror: string;
  const ids: Record<string, string> = {};
  const hostKeys: Record<string, string> = {};
  const hostAddress = Object.values(networkInterfaces()).flat().find((a) => a && !a.internal && a.family === 'IPv4')!.address;

  beforeAll(async () => {
    target = privateTarget();
    listener = await hostListener();
    listenerPort = listener.port;
    reachedListener = listener.reached;
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

  it('cuts the machines off while its network rules are gone, and lets them out again once they are back', async () => {
    const table = egressTable(t.config.machineUidBase);
    const listing = () => {
      try {
        return execFileSync('nft', ['-s', 'list', 'table', 'inet', table], { encoding: 'utf8', stdio: 'pipe' });
      } catch {
        return null; // missing
      }
    };
    const rules = listing();
    expect(rules).toContain('jump machines');
    const qemu = listQemuProcesses().find((p) => p.machineId === ids['iso-a'] && p.machineDir?.startsWith(t.config.dataDir))!;
    const state = () => /^State:\s+(\S)/m.exec(readFileSync(`/proc/${qemu.pid}/status`, 'utf8'))![1];

    // Deleted (only kiste's table, never the host's whole ruleset): back within seconds.
    execFileSync('nft', ['delete', 'table', 'inet', table]);
    expect(await pollUntil(() => (listing() === rules ? true : undefined), 5000, 50)).toBe(true);

    // Deleted while nft cannot put it back: the QEMUs stay frozen and starts are refused; a guest
    // asked meanwhile to reach a host service gets nothing done until the rules are back. (A service
    // of its own: the kernel, not QEMU, retransmits the SYNs of the attempts dropped before, and
    // while the table is missing those handshakes complete; no data follows them, since QEMU stays
    // frozen until the rules are back.)
    const service = await hostListener();
    const load = jest.spyOn(HostFirewall.prototype, 'load').mockRejectedValue(new Error('nft: Operation not permitted'));
    let attempt: ReturnType<typeof guestRun> | undefined;
    try {
      execFileSync('nft', ['delete', 'table', 'inet', table]);
      expect(await pollUntil(() => (state() === 'T' ? true : undefined), 5000, 20)).toBe(true);
      const refused = await t.api.post('/v1/instances').set(bearer(key))
        .send({ profile: 'desktop', name: 'iso-d', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY }).expect(503);
      expect(refused.body.error).toMatchObject({ code: 'K09' });
      expect(refused.body.error.message).toContain('network rules are not in place');
      attempt = guestRun(t, ids['iso-a']!, `${PROBE}\nprobe 10.0.2.2 ${service.port}`);
      await sleep(3000);
      expect(state()).toBe('T');
      expect(listing()).toBeNull();
    } finally {
      load.mockRestore();
    }
    try {
      expect(await pollUntil(() => (listing() === rules ? true : undefined), 5000, 50)).toBe(true);
      expect((await attempt!).stdout).toContain(`10.0.2.2 ${service.port} closed`);
      expect(state()).not.toBe('T');
      expect(service.reached).toEqual([]);
    } finally {
      service.close();
    }
    // With the rules back: the host's loopback closed, the outside open.
    const out = await guestRun(t, ids['iso-a']!, `${PROBE}\nprobe 10.0.2.2 ${listenerPort} &\nprobe ${mirror} 80 &\nwait`);
    expect(out.stdout).toContain(`10.0.2.2 ${listenerPort} closed`);
    expect(out.stdout).toContain(`${mirror} 80 open`);
  });

  it('keeps machines apart: a guest at the other guest\'s address meets only itself', async () => {
    // Both guests are 10.0.2.15 on networks of their own; nothing of either listens on the host.
    const scan = await guestRun(t, ids['iso-a']!, 'ssh-keyscan -T 5 -t ed25519 10.0.2.15 2>/dev/null');
    const keyOf = (line: string) => line.split(' ').slice(0, 2).join(' ');
    expect(scan.stdout).toContain(keyOf(hostKeys['iso-a']!).split(' ')[1]);
    expect(scan.stdout).not.toContain(keyOf(hostKeys['iso-b']!).split(' ')[1]);
  });

  /** A machine's QEMU (of this service) and its user. */
  const qemuOf = (name: string) => {
    const qemu = listQemuProcesses().find((p) => p.machineId === ids[name] && p.machineDir?.startsWith(t.config.dataDir))!;
    return { pid: qemu.pid, user: { uid: statSync(`/proc/${qemu.pid}`).uid, gid: t.config.machineUidBase } };
  };
  const activeLayerOf = (id: string) => join(t.config.dataDir, 'layers', JSON.parse(readFileSync(join(t.config.dataDir, 'machines', id, 'disk.json'), 'utf8')).active as string);

  it('shows each QEMU only its own files, and of /proc only its own processes', async () => {
    const [a, b] = [qemuOf('iso-a'), qemuOf('iso-b')];
    expect(new Set([mountNamespace('self'), mountNamespace(a.pid), mountNamespace(b.pid)]).size).toBe(3);
    // its own layer is there, at its path; the other machine's layer and folder are not
    expect(seesPath(a.pid, activeLayerOf(ids['iso-a']!))).toBe(true);
    expect(seesPath(a.pid, activeLayerOf(ids['iso-b']!))).toBe(false);
    expect(seesPath(a.pid, join(t.config.dataDir, 'machines', ids['iso-b']!))).toBe(false);
    expect(seesPath(a.pid, join(t.config.dataDir, 'machines', ids['iso-a']!, 'disk.json'))).toBe(false);
    // everything mounted there: a read-only root, system folders, devices, its image files, its layers and run folder, its /proc
    const run = join(t.config.dataDir, 'machines', ids['iso-a']!, 'run');
    const mounts = mountsOf(a.pid);
    const expected = (point: string) => ['/', '/proc', '/etc/resolv.conf', '/etc/ld.so.cache', join(t.config.dataDir, 'layers'), run, join(run, 'serial.log')].includes(point)
      || /^\/(usr|bin|sbin|lib\w*)$/.test(point) || /^\/dev\/(null|zero|full|random|urandom|kvm)$/.test(point)
      || (point.startsWith(`${TEST_IMAGE_DIR}/`) && statSync(point).isFile());
    expect(mounts.map((m) => m.point).filter((point) => !expected(point))).toEqual([]);
    expect(mounts.find((m) => m.point === '/')).toMatchObject({ type: 'tmpfs' });
    expect(mounts.find((m) => m.point === '/proc')!.options).toContain('hidepid=invisible');
    // /proc as its user sees it there: its own processes (QEMU, the serial copier), not the other QEMU
    const seen = processesSeenAs(a.pid, a.user);
    expect(seen.map((p) => p.pid)).toContain(a.pid);
    expect(seen.map((p) => p.pid)).not.toContain(b.pid);
    expect(new Set(seen.map((p) => p.uid))).toEqual(new Set([a.user.uid]));
  });

  it('stops a serial log at its cap while the guest keeps writing, and the guest keeps running', async () => {
    const log = join(t.config.dataDir, 'machines', ids['iso-b']!, 'run', 'serial.log');
    // a long-lived machine's log, 320 KiB short of its cap: a start (here a resume) leaves it as it is
    await t.api.post('/v1/instances/iso-b/stop').set(bearer(key)).send({ snapshot: true }).expect(200);
    writeFileSync(log, Buffer.alloc(SERIAL_LOG_MAX_BYTES - (320 << 10), 'earlier console output\n'));
    await t.api.post('/v1/instances/iso-b/resume').set(bearer(key)).expect(200);
    const flood = guestRun(t, ids['iso-b']!, 'echo $$ > /run/flood.pid; exec timeout 600 yes "kiste serial flood 0123456789 0123456789 0123456789 0123456789" > /dev/ttyS0');
    try {
      expect(await untilSize(log, SERIAL_LOG_MAX_BYTES, 60_000)).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 3000));
      expect(statSync(log).size).toBe(SERIAL_LOG_MAX_BYTES);
      // a full log holds nothing up: the guest, still flooding, answers
      expect((await guestRun(t, ids['iso-b']!, 'kill -0 $(cat /run/flood.pid) && echo flooding')).stdout).toBe('flooding\n');
    } finally {
      await guestRun(t, ids['iso-b']!, 'kill $(cat /run/flood.pid); true');
      await flood;
    }
  });

  it("leaves a deleted machine's user no access to any layer, also to those a fork still uses", async () => {
    const host = t.services.compute.inProcess!.machineHost;
    const folders = [t.config.dataDir, TEST_IMAGE_DIR];
    const uidOf = (id: string) => Number(readFileSync(join(t.config.dataDir, 'machines', id, 'jail-user'), 'utf8'));
    // a live fork: iso-b's top freezes under a new top, which its QEMU opens through its view
    await host.forkDisk(ids['iso-b']!, 'jail-x');
    const b = qemuOf('iso-b');
    expect(seesPath(b.pid, activeLayerOf(ids['iso-b']!))).toBe(true);
    expect((await guestRun(t, ids['iso-b']!, 'sync && echo written')).stdout).toBe('written\n');
    await host.forkDisk('jail-x', 'jail-y'); // shares jail-x's layer and iso-b's frozen one
    const [x, y] = [uidOf('jail-x'), uidOf('jail-y')];
    expect(accessOf(y, folders).some((entry) => entry.endsWith(`user:${y}:r--`))).toBe(true);

    await host.destroy('jail-x');
    expect(accessOf(x, folders)).toEqual([]);
    expect(accessOf(y, folders).some((entry) => entry.includes('jail-x-0.qcow2'))).toBe(true); // the fork still reads it
    await host.destroy('jail-y');
    expect(accessOf(y, folders)).toEqual([]);
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
