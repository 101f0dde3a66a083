// metrics (real /proc and a fixture /proc), personalise (host name, keys, machine id) into a
// temporary root, readiness, time, fs.sync and shutdown, through the real agent bundle. System
// commands that would change the machine running the tests (hostname, date, systemctl, sync) are
// stand-ins that log their arguments.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import { join } from 'node:path';
import { AgentCallError, AgentClient } from '../../src/compute/agent-client';
import { generateHostKeys } from '../../src/compute/ssh-host-keys';
import type { MetricsResult } from '../../src/protocol/agent';
import { responseValidator } from '../../src/http/validation';
import { AgentProcess, eventually, freePort } from './harness';

jest.setTimeout(120_000);

/** The agent's metrics wrapped the way the service answers them must match the spec's schema. */
function expectSpecShape(metrics: MetricsResult): void {
  const validate = responseValidator('GetInstanceMetrics', 200)!;
  const body = { object: 'instance_metrics', instance: 'test', sampled_at: new Date().toISOString(), ...metrics };
  if (!validate(body)) throw new Error(`metrics off-spec: ${JSON.stringify(validate.errors)}`);
}

describe('with the real /proc', () => {
  let agent: AgentProcess;
  let client: AgentClient;
  let sshPort: number;

  beforeAll(async () => {
    sshPort = await freePort();
    agent = await AgentProcess.start({ sshPort });
    client = agent.client();
    await client.start();
  });

  afterAll(async () => {
    client?.close();
    await agent?.stop();
  });

  test('metrics describe this machine', async () => {
    const started = Date.now();
    const metrics = await client.metrics();
    expect(Date.now() - started).toBeGreaterThanOrEqual(190); // two CPU samples 200 ms apart
    expectSpecShape(metrics);
    expect(metrics.cpu.cores).toBe(os.cpus().length);
    expect(metrics.cpu.percent).not.toBeNull();
    expect(metrics.cpu.percent!).toBeGreaterThanOrEqual(0);
    expect(metrics.cpu.percent!).toBeLessThanOrEqual(100);
    expect(metrics.cpu.load_1).toBeCloseTo(os.loadavg()[0], 0);
    expect(Math.abs(metrics.memory.total_mib - os.totalmem() / 2 ** 20)).toBeLessThan(2);
    expect(metrics.memory.used_mib + metrics.memory.available_mib).toBeLessThanOrEqual(metrics.memory.total_mib + 1);
    expect(metrics.disk.total_mib).toBeGreaterThan(0);
    expect(metrics.disk.used_mib).toBeLessThanOrEqual(metrics.disk.total_mib);
    expect(metrics.uptime_seconds).toBeCloseTo(os.uptime(), -1);
    expect(metrics.processes.length).toBeGreaterThan(0);
    expect(metrics.processes.length).toBeLessThanOrEqual(20);
    const cpus = metrics.processes.map((p) => p.cpu_percent ?? -1);
    expect(cpus).toEqual([...cpus].sort((a, b) => b - a));
  });

  test('a busy process is listed with its CPU share', async () => {
    const busy = await client.exec({ argv: ['sh', '-c', 'while :; do :; done'], timeout_ms: 5000 });
    try {
      const metrics = await client.metrics(400);
      // Other busy processes on a shared machine may rank higher; ours must be among the top 20.
      const top = metrics.processes.find((p) => p.pid === busy.pid)!;
      expect(top).toBeDefined();
      expect(top.name).toBe('sh');
      expect(top.command).toBe('sh -c while :; do :; done');
      expect(top.user).toBe('root');
      expect(top.cpu_percent!).toBeGreaterThan(30);
    } finally {
      await busy.cancel(0);
      for await (const _ of busy);
    }
  });

  test('readiness: not ready until the SSH port listens, then an unsolicited ready event', async () => {
    expect(await client.ready()).toEqual({ ssh_listening: false, commands: true });
    const event = new Promise((resolve) => client.once('ready', resolve));
    const sshd = net.createServer((s) => s.destroy());
    await new Promise<void>((r) => sshd.listen(sshPort, '127.0.0.1', r));
    try {
      expect(await event).toEqual({ ssh_listening: true, commands: true });
      expect(await client.waitReady(2000)).toEqual({ ssh_listening: true, commands: true });
    } finally {
      sshd.close();
    }
  });

  test('waitReady times out while SSH is down', async () => {
    const error = await client.waitReady(600).catch((e: unknown) => e);
    expect((error as AgentCallError).code).toBe('timeout');
  });

  test('personalise: host name, authorized keys, fresh host keys', async () => {
    const keysDir = mkdtempSync(join(os.tmpdir(), 'kiste-keys-'));
    execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'me@laptop', '-f', join(keysDir, 'k')]);
    const userKey = readFileSync(join(keysDir, 'k.pub'), 'utf8').trim();
    rmSync(keysDir, { recursive: true, force: true });
    const deviceKey = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGw1J9cTb4hA4bMCbZ8c2xq6fXoYb2vJ0lV4o3b6mJ0K device';
    writeFileSync(join(agent.root, 'etc/hosts'), '127.0.0.1\tlocalhost\n127.0.1.1\told-name\n');

    const first = await client.personalise({ hostname: 'quiet-otter', authorized_keys: [userKey, deviceKey], regenerate_host_keys: true });
    expect(first.hostname).toBe('quiet-otter');
    expect(readFileSync(join(agent.root, 'etc/hostname'), 'utf8')).toBe('quiet-otter\n');
    expect(readFileSync(join(agent.root, 'etc/hosts'), 'utf8')).toBe('127.0.0.1\tlocalhost\n127.0.1.1\tquiet-otter\n');
    expect(agent.commands()).toContain('hostname quiet-otter');
    const sshDir = join(agent.root, 'root/.ssh');
    expect(statSync(sshDir).mode & 0o777).toBe(0o700);
    expect(statSync(join(sshDir, 'authorized_keys')).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(sshDir, 'authorized_keys'), 'utf8')).toBe(`${userKey}\n${deviceKey}\n`);

    const algorithms = first.host_keys.map((k) => k.algorithm).sort();
    expect(algorithms).toEqual(['ecdsa-sha2-nistp256', 'ssh-ed25519', 'ssh-rsa']);
    for (const key of first.host_keys) {
      const file = readdirSync(join(agent.root, 'etc/ssh')).find((f) => f.endsWith('.pub') && readFileSync(join(agent.root, 'etc/ssh', f), 'utf8').startsWith(key.public_key));
      expect(file).toBeDefined();
      expect(key.public_key).toMatch(new RegExp(`^${key.algorithm} [A-Za-z0-9+/=]+$`));
    }

    // Again (after a fork or restore): new keys; with systemd present, sshd is reloaded.
    mkdirSync(join(agent.root, 'run/systemd/system'), { recursive: true });
    const second = await client.personalise({ hostname: 'quiet-otter.example', authorized_keys: [], regenerate_host_keys: true });
    expect(second.host_keys.map((k) => k.public_key)).not.toEqual(expect.arrayContaining(first.host_keys.map((k) => k.public_key)));
    expect(agent.commands()).toContain('systemctl reload-or-restart ssh');
    expect(readFileSync(join(agent.root, 'etc/hosts'), 'utf8')).toContain('127.0.1.1\tquiet-otter.example quiet-otter\n');
    expect(readFileSync(join(sshDir, 'authorized_keys'), 'utf8')).toBe('');

    // Without regeneration the keys stay and are reported.
    const third = await client.personalise({ hostname: 'quiet-otter', authorized_keys: [deviceKey], regenerate_host_keys: false });
    expect(third.host_keys).toEqual(second.host_keys);
  });

  test('personalise writes the host keys the host made (no ssh-keygen in the guest)', async () => {
    const keys = generateHostKeys();
    const sshEtc = join(agent.root, 'etc/ssh');
    mkdirSync(sshEtc, { recursive: true });
    writeFileSync(join(sshEtc, 'ssh_host_rsa_key'), 'an old key of the source disk');
    writeFileSync(join(sshEtc, 'ssh_host_rsa_key.pub'), 'ssh-rsa AAAA old');
    const before = agent.commands().filter((c) => c.startsWith('ssh-keygen')).length;
    const result = await client.personalise({
      hostname: 'keyed', authorized_keys: [], regenerate_host_keys: true,
      host_keys: keys.map((k) => ({ algorithm: k.algorithm, private_key: k.privateKey, public_key: k.publicKey })),
    });
    expect(agent.commands().filter((c) => c.startsWith('ssh-keygen')).length).toBe(before);
    expect(result.host_keys.map((k) => k.public_key).sort()).toEqual(keys.map((k) => k.publicKey).sort());
    expect(readdirSync(sshEtc).filter((f) => f.startsWith('ssh_host_')).sort()).toEqual([
      'ssh_host_ecdsa_key', 'ssh_host_ecdsa_key.pub', 'ssh_host_ed25519_key', 'ssh_host_ed25519_key.pub',
    ]);
    expect(statSync(join(sshEtc, 'ssh_host_ed25519_key')).mode & 0o777).toBe(0o600);
    expect(statSync(join(sshEtc, 'ssh_host_ed25519_key.pub')).mode & 0o777).toBe(0o644);
    expect(readFileSync(join(sshEtc, 'ssh_host_ed25519_key'), 'utf8')).toBe(keys[0]!.privateKey);
    // What sshd will load: OpenSSH reads the file back to the same public key.
    const derived = execFileSync('ssh-keygen', ['-y', '-f', join(sshEtc, 'ssh_host_ecdsa_key')], { encoding: 'utf8' });
    expect(derived.trim()).toBe(keys[1]!.publicKey);

    const good = { algorithm: keys[0]!.algorithm, private_key: keys[0]!.privateKey, public_key: keys[0]!.publicKey };
    for (const bad of [
      [{ ...good, algorithm: 'ssh-rsa' }],
      [{ ...good, private_key: 'not a key' }],
      [{ ...good, public_key: `${good.public_key}\nssh-ed25519 AAAA injected` }],
      [],
      'x',
    ]) {
      const error = await client.personalise({ hostname: 'keyed', authorized_keys: [], regenerate_host_keys: true, host_keys: bad as never }).catch((e: unknown) => e);
      expect((error as AgentCallError).code).toBe('bad_request');
    }
    // A refused request changed nothing.
    expect(readFileSync(join(sshEtc, 'ssh_host_ed25519_key'), 'utf8')).toBe(keys[0]!.privateKey);
  });

  test('personalise gives every new disk its own machine id', async () => {
    // A fork's disk as it arrives: the source's committed id, D-Bus's copy of it, the source's seed.
    const sourceId = '0123456789abcdef0123456789abcdef';
    const file = (path: string) => join(agent.root, path);
    mkdirSync(file('var/lib/dbus'), { recursive: true });
    mkdirSync(file('var/lib/systemd'), { recursive: true });
    writeFileSync(file('etc/machine-id'), `${sourceId}\n`, { mode: 0o444 });
    writeFileSync(file('var/lib/dbus/machine-id'), `${sourceId}\n`);
    writeFileSync(file('var/lib/systemd/random-seed'), randomBytes(512));
    const params = { hostname: 'fork-one', authorized_keys: [], regenerate_host_keys: true };

    const first = await client.personalise(params);
    const firstId = readFileSync(file('etc/machine-id'), 'utf8');
    expect(firstId).toMatch(/^[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}\n$/);
    expect(firstId.trim()).not.toBe(sourceId);
    expect(first.machine_id).toBe(firstId.trim());
    expect(statSync(file('etc/machine-id')).mode & 0o777).toBe(0o444);
    expect(readFileSync(file('var/lib/dbus/machine-id'), 'utf8')).toBe(firstId);
    expect(existsSync(file('var/lib/systemd/random-seed'))).toBe(false);

    // The next new disk (another fork of the same source) gets yet another id. Debian's D-Bus
    // link to /etc/machine-id (here relative, so that it resolves inside the test root) stays a link.
    writeFileSync(file('var/lib/systemd/random-seed'), randomBytes(512));
    rmSync(file('var/lib/dbus/machine-id'));
    symlinkSync('../../../etc/machine-id', file('var/lib/dbus/machine-id'));
    const second = await client.personalise(params);
    expect(second.machine_id).toMatch(/^[0-9a-f]{32}$/);
    expect(second.machine_id).not.toBe(first.machine_id);
    expect(readFileSync(file('etc/machine-id'), 'utf8')).toBe(`${second.machine_id}\n`);
    expect(lstatSync(file('var/lib/dbus/machine-id')).isSymbolicLink()).toBe(true);
    expect(readFileSync(file('var/lib/dbus/machine-id'), 'utf8')).toBe(`${second.machine_id}\n`);
    expect(existsSync(file('var/lib/systemd/random-seed'))).toBe(false);

    // A link that leads out of the guest's root is replaced by a copy, never written through.
    const outside = join(agent.dir, 'outside-machine-id');
    writeFileSync(outside, `${sourceId}\n`);
    rmSync(file('var/lib/dbus/machine-id'));
    symlinkSync(outside, file('var/lib/dbus/machine-id'));
    const third = await client.personalise(params);
    expect(readFileSync(outside, 'utf8')).toBe(`${sourceId}\n`);
    expect(lstatSync(file('var/lib/dbus/machine-id')).isSymbolicLink()).toBe(false);
    expect(readFileSync(file('var/lib/dbus/machine-id'), 'utf8')).toBe(`${third.machine_id}\n`);

    // Later boots of the same disk (no regeneration) keep and report the id, and leave the seed.
    writeFileSync(file('var/lib/systemd/random-seed'), randomBytes(512));
    const again = await client.personalise({ ...params, regenerate_host_keys: false });
    expect(again.machine_id).toBe(third.machine_id);
    expect(readFileSync(file('etc/machine-id'), 'utf8')).toBe(`${third.machine_id}\n`);
    expect(existsSync(file('var/lib/systemd/random-seed'))).toBe(true);

    // An image's empty file (not yet committed) is reported as no id.
    writeFileSync(file('etc/machine-id'), '');
    expect((await client.personalise({ ...params, regenerate_host_keys: false })).machine_id).toBeNull();
  });

  test('personalise rejects bad input', async () => {
    for (const params of [
      { hostname: 'bad_name!', authorized_keys: [], regenerate_host_keys: false },
      { hostname: 'ok', authorized_keys: ['line one\nline two'], regenerate_host_keys: false },
      { hostname: 'ok', authorized_keys: 'x', regenerate_host_keys: false },
    ]) {
      const error = await client.personalise(params as never).catch((e: unknown) => e);
      expect((error as AgentCallError).code).toBe('bad_request');
    }
  });

  test('time.set, fs.sync and shutdown run their commands', async () => {
    const time = await client.setTime(1_700_000_000_123);
    expect(time.previous_epoch_ms).toBeGreaterThan(1_600_000_000_000);
    expect(agent.commands()).toContain('date -u -s @1700000000.123');
    await client.syncFilesystems();
    expect(agent.commands()).toContain('sync');

    expect(existsSync(join(agent.root, 'run/systemd/system'))).toBe(true); // made by the personalise test
    expect(await client.shutdown(true)).toEqual({ accepted: true });
    await eventually(() => agent.commands().includes('systemctl reboot'), 3000, 'systemctl reboot');
    rmSync(join(agent.root, 'run/systemd'), { recursive: true });
    await client.shutdown(false);
    await eventually(() => agent.commands().includes('poweroff'), 3000, 'poweroff');
  });

  test('requests before hello are refused', async () => {
    // A raw connection that skips hello: SYNC, then a request.
    const { encodeJson, encodeSync, FrameDecoder, FrameKind, SyncPhase, decodeJson } = await import('../../src/protocol/agent');
    client.close(); // one host at a time: keep the client from taking the socket back meanwhile
    const socket = net.createConnection(agent.socketPath);
    const answers: unknown[] = [];
    const decoder = new FrameDecoder((f) => f.kind === FrameKind.RESPONSE && answers.push(decodeJson(f)), undefined, true);
    socket.on('data', (c) => decoder.push(c));
    await new Promise((r) => socket.once('connect', r));
    socket.write(encodeSync(SyncPhase.SYNC, '00112233aabbccdd'));
    socket.write(encodeJson(FrameKind.REQUEST, 0, { id: 7, method: 'metrics', params: {} }));
    socket.write(encodeJson(FrameKind.REQUEST, 0, { id: 8, method: 'hello', params: { protocol_versions: [99] } }));
    await eventually(() => answers.length === 2, 3000, 'answers');
    socket.destroy();
    expect(answers).toEqual([
      { id: 7, error: { code: 'hello_required', message: 'send hello first' } },
      { id: 8, error: { code: 'unsupported_protocol', message: 'agent speaks protocol versions 1; host offered 99' } },
    ]);
    client = agent.client();
    await client.start();
    expect((await client.run({ argv: ['echo', 'back'] })).stdout.toString()).toBe('back\n');
  });
});

describe('with a fixture /proc', () => {
  let agent: AgentProcess;
  let client: AgentClient;
  let proc: string;

  beforeAll(async () => {
    proc = mkdtempSync(join(os.tmpdir(), 'kiste-proc-'));
    const files: Record<string, string> = {
      stat: 'cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\ncpu1 50 0 25 400 25 0 0 0 0 0\nintr 0\n',
      loadavg: '0.50 0.25 0.10 1/123 4567\n',
      meminfo: 'MemTotal:        2097152 kB\nMemFree:          100000 kB\nMemAvailable:    1048576 kB\n',
      uptime: '12345.67 20000.00\n',
      'sys/kernel/random/boot_id': '11111111-2222-3333-4444-555555555555\n',
      '42/stat': '42 (my (odd) prog) S 1 42 42 0 -1 4194560 100 0 0 0 700 300 0 0 20 0 1 0 5000 104857600 25600 18446744073709551615\n',
      '42/cmdline': 'my-prog\0--flag\0value\0',
      '42/status': 'Name:\tmy (odd) prog\nUid:\t1000\t1000\t1000\t1000\n',
      '7/stat': '7 (kworker/0:1) I 2 0 0 0 -1 69238880 0 0 0 0 0 0 0 0 20 0 1 0 10 0 0 18446744073709551615\n',
      '7/cmdline': '',
      '7/status': 'Name:\tkworker/0:1\nUid:\t0\t0\t0\t0\n',
    };
    for (const [name, content] of Object.entries(files)) {
      mkdirSync(join(proc, name, '..'), { recursive: true });
      writeFileSync(join(proc, name), content);
    }
    agent = await AgentProcess.start({ proc });
    writeFileSync(join(agent.root, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/bash\nada:x:1000:1000::/home/ada:/bin/bash\n');
    client = agent.client();
    await client.start();
  });

  afterAll(async () => {
    client?.close();
    await agent?.stop();
    rmSync(proc, { recursive: true, force: true });
  });

  test('hello reads boot id and uptime from it', () => {
    expect(client.hello).toMatchObject({ boot_id: '11111111-2222-3333-4444-555555555555', uptime_seconds: 12345 });
  });

  test('metrics parse it exactly', async () => {
    const metrics = await client.metrics(20);
    expectSpecShape(metrics);
    expect(metrics).toEqual({
      cpu: { cores: 2, load_1: 0.5, load_5: 0.25, load_15: 0.1, percent: 0 },
      memory: { total_mib: 2048, used_mib: 1024, available_mib: 1024 },
      disk: expect.objectContaining({ total_mib: expect.any(Number) }),
      uptime_seconds: 12345,
      processes: [
        { pid: 42, name: 'my (odd) prog', command: 'my-prog --flag value', user: 'ada', cpu_percent: 0, memory_mib: 100 },
        { pid: 7, name: 'kworker/0:1', command: '[kworker/0:1]', user: 'root', cpu_percent: 0, memory_mib: 0 },
      ],
    });
  });

  test('unreadable CPU samples give percent null', async () => {
    rmSync(join(proc, 'stat'));
    const metrics = await client.metrics(20);
    expect(metrics.cpu.percent).toBeNull();
    expect(metrics.cpu.cores).toBe(os.cpus().length);
    expectSpecShape(metrics);
  });
});
