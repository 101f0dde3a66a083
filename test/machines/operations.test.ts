// Lifecycle and exec behaviours over HTTP on one real machine (the minimal image under QEMU), with
// a short lifecycle wait bound (so stop, upgrade and resume answer 202 and finish in the background)
// and a 1 MiB command output limit:
// exec completions signaled, output_limit_exceeded, cancelled (client gone; interrupt) → upgrade of
// a running machine (reboot, files stay) → stop with session past the bound (202, instance.stopped)
// → upgrade of a stopped machine (saved session dropped; the next start is a cold boot) → plain stop
// past the bound → delete.
import { createServer, request as httpRequest, Server } from 'node:http';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { listQemuProcesses } from '../../src/compute/qemu';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { apiKeyFor, bearer, createAccount, startTestService, TestService } from '../support/harness';
import { waitUntil as waitUntilShared } from '../support/service-recovery';

jest.setTimeout(900_000);

const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste';
const OUTPUT_LIMIT = 1024 * 1024;
const NAME = 'ops';

type Line = Record<string, any>;

/** The shared wait, with this suite's defaults (a boot's worth of time, polled every 250 ms). */
const waitUntil = <T>(what: string, probe: () => Promise<T | undefined | null | false>, timeoutMs = 240_000, everyMs = 250): Promise<T> =>
  waitUntilShared(what, probe, timeoutMs, everyMs);

const execLines = (res: { text: string }): Line[] => res.text.trim().split('\n').map((line) => JSON.parse(line));

/** An exec over a real socket, read line by line as it streams; destroy() hangs up like a client that goes away. */
function rawExec(port: number, key: string, body: Record<string, unknown>) {
  const lines: Line[] = [];
  let status = 0;
  let buffered = '';
  const req = httpRequest({
    host: '127.0.0.1',
    port,
    method: 'POST',
    path: `/v1/instances/${NAME}/exec`,
    headers: { ...bearer(key), 'content-type': 'application/json' },
  });
  const ended = new Promise<void>((resolve) => {
    req.on('response', (res) => {
      status = res.statusCode ?? 0;
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buffered += chunk;
        let newline;
        while ((newline = buffered.indexOf('\n')) >= 0) {
          lines.push(JSON.parse(buffered.slice(0, newline)));
          buffered = buffered.slice(newline + 1);
        }
      });
      res.on('end', () => resolve());
      res.on('close', () => resolve());
    });
    req.on('error', () => resolve()); // after destroy()
    req.on('close', () => resolve());
  });
  req.end(JSON.stringify(body));
  return {
    lines,
    ended,
    get status() {
      return status;
    },
    waitFor: (what: string, match: (line: Line) => boolean) => waitUntil(what, async () => lines.find(match), 120_000, 10),
    destroy: () => req.destroy(),
  };
}

describe('instance operations over HTTP on one machine', () => {
  let t: TestService;
  let key: string;
  let server: Server;
  let port: number;
  let id: string;
  let bootId: string;

  async function guest(script: string): Promise<{ stdout: string; exitCode: number }> {
    const handle = await t.services.machineHost.agent(id).exec({ argv: ['sh', '-c', script] });
    let stdout = '';
    for await (const chunk of handle) if (chunk.stream === 'stdout') stdout += chunk.data.toString('utf8');
    return { stdout, exitCode: (await handle.exit).exit_code };
  }

  /** Pids in the guest whose command line is exactly `argv` (the probe's own shell never matches). */
  async function guestPids(argv: string[]): Promise<string[]> {
    const wanted = argv.join(' ') + ' ';
    const { stdout } = await guest(`for p in /proc/[0-9]*; do [ "$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)" = '${wanted}' ] && echo \${p#/proc/}; done; true`);
    return stdout.split('\n').filter(Boolean);
  }

  const row = () => t.services.database.prisma.instance.findUniqueOrThrow({ where: { id } });
  const getInstance = async () => (await t.api.get(`/v1/instances/${NAME}`).set(bearer(key)).expect(200)).body;
  /** The operation is over once the row holds none; then the answer shows the final state. */
  const settled = async () => {
    await waitUntil('the operation to finish', async () => (await row()).operation === null);
    return getInstance();
  };
  const events = (type: string) =>
    t.services.database.prisma.event.findMany({ where: { resourceId: id, type }, orderBy: { sequence: 'asc' } });
  const command = async (commandId: string) =>
    (await t.api.get(`/v1/instances/${NAME}/commands/${commandId}`).set(bearer(key)).expect(200)).body;

  beforeAll(async () => {
    await ensureTestImage();
    t = await startTestService({
      compute: 'worker', // the service's default layout: the machine runs in a local kiste-worker
      env: { KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_IMAGE_PROFILE: 'minimal' },
      lifecycleWaitMs: 1, // every lifecycle call that touches the machine outlives this bound
      commandOutputLimitBytes: OUTPUT_LIMIT,
    });
    expect(await t.services.machineHost.refreshImage('minimal')).not.toBeNull();
    key = await apiKeyFor(t, await createAccount(t));
    server = createServer(t.app);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as { port: number }).port;
    const created = await t.api.post('/v1/instances').set(bearer(key))
      .send({ profile: 'desktop', name: NAME, vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY });
    if (created.status !== 200) throw new Error(`create failed: ${created.status} ${JSON.stringify(created.body)}`);
    expect(created.body).toMatchObject({ status: 'running' }); // create waits for the machine, whatever the bound
    id = created.body.id;
    bootId = (await guest('cat /proc/sys/kernel/random/boot_id')).stdout.trim();
    expect(bootId).toMatch(/^[0-9a-f-]{36}$/);
  });

  afterAll(async () => {
    if (server) await new Promise((resolve) => server.close(resolve));
    if (!t) return;
    await Promise.allSettled(t.services.instances.operations.pending());
    for (const machine of await t.services.machineHost.knownMachineIds()) await t.services.machineHost.destroy(machine);
    await t.close();
  });

  it('exec: a command ended by a signal completes as signaled', async () => {
    const lines = execLines(await t.api.post(`/v1/instances/${NAME}/exec`).set(bearer(key))
      .send({ argv: ['sh', '-c', 'kill -TERM $$'] }).expect(200));
    const completed = lines.at(-1)!;
    expect(completed).toMatchObject({ type: 'completed', status: 'signaled', signal: 15, exit_code: 128 + 15 });
    expect(await command(completed.id)).toMatchObject({ status: 'finished', completion_status: 'signaled', signal: 15 });
  });

  it('exec: output past the limit stops the command as output_limit_exceeded', async () => {
    const lines = execLines(await t.api.post(`/v1/instances/${NAME}/exec`).set(bearer(key))
      .send({ argv: ['cat', '/dev/zero'], timeout_ms: 120_000 }).expect(200));
    const completed = lines.at(-1)!;
    expect(completed).toMatchObject({ type: 'completed', status: 'output_limit_exceeded', stdout_bytes: OUTPUT_LIMIT });
    const streamed = lines.filter((line) => line.type === 'output').reduce((sum, line) => sum + Buffer.from(line.data_base64, 'base64').length, 0);
    expect(streamed).toBe(OUTPUT_LIMIT); // exactly the limit reaches the client, not a byte more
    expect(await command(completed.id)).toMatchObject({ completion_status: 'output_limit_exceeded', stdout_bytes: OUTPUT_LIMIT });
    expect(await guestPids(['cat', '/dev/zero'])).toEqual([]);
  });

  it('exec: a client that hangs up after started cancels the command', async () => {
    const commandId = randomUUID();
    const exec = rawExec(port, key, { id: commandId, argv: ['sleep', '4243'] });
    await exec.waitFor('started', (line) => line.type === 'started');
    exec.destroy();
    await exec.ended;
    const record = await waitUntil('the command record to finish', async () => {
      const current = await command(commandId);
      return current.status !== 'running' && current;
    }, 60_000);
    expect(record).toMatchObject({ status: 'finished', completion_status: 'cancelled', signal: 15 });
    expect(record.finished_at).not.toBeNull();
    expect(await guestPids(['sleep', '4243'])).toEqual([]);
  });

  it('exec: an interrupt from another request cancels the command', async () => {
    const commandId = randomUUID();
    const exec = rawExec(port, key, { id: commandId, argv: ['sh', '-c', 'echo ready; exec sleep 4244'] });
    await exec.waitFor('output', (line) => line.type === 'output');
    expect(await guestPids(['sleep', '4244'])).toHaveLength(1);
    const interrupted = await t.api.post(`/v1/instances/${NAME}/commands/${commandId}/interrupt`).set(bearer(key))
      .send({ reason: 'test' }).expect(200);
    expect(interrupted.body.accepted).toBe(true);
    expect(interrupted.body.command).toMatchObject({ id: commandId, status: 'running' });
    expect(interrupted.body.command.cancel_requested_at).not.toBeNull();
    await exec.ended;
    expect(exec.status).toBe(200);
    expect(exec.lines.at(-1)).toMatchObject({ type: 'completed', id: commandId, status: 'cancelled', signal: 15 });
    expect(await command(commandId)).toMatchObject({ status: 'finished', completion_status: 'cancelled' });
    expect(await guestPids(['sleep', '4244'])).toEqual([]);
    // the command is over: a second interrupt is not accepted
    const late = await t.api.post(`/v1/instances/${NAME}/commands/${commandId}/interrupt`).set(bearer(key)).send({}).expect(200);
    expect(late.body.accepted).toBe(false);
  });

  it('upgrade of a running instance reboots it; files written before stay', async () => {
    await guest('echo kept > /root/kept && sync');
    const upgrading = await t.api.post(`/v1/instances/${NAME}/upgrade`).set(bearer(key));
    expect(upgrading.status).toBe(202);
    expect(upgrading.body).toMatchObject({ name: NAME, status: 'starting' });
    const busy = await t.api.post(`/v1/instances/${NAME}/stop`).set(bearer(key)).expect(409);
    expect(busy.body.error.code).toBe('K05');
    const after = await settled();
    expect(after).toMatchObject({ status: 'running', desired_state: 'running', session_saved: false, update_available: false });
    expect(after.image_version).toBe(after.latest_image_version);
    const newBootId = (await guest('cat /proc/sys/kernel/random/boot_id')).stdout.trim();
    expect(newBootId).not.toBe(bootId); // it rebooted
    bootId = newBootId;
    expect((await guest('cat /root/kept')).stdout).toBe('kept\n');
    expect((await events('instance.running')).at(-1)!.data).toMatchObject({ resumed: false });
  });

  it('stop with session past the wait bound answers 202, then finishes in the background with instance.stopped', async () => {
    await guest('setsid sleep 100000 > /dev/null 2>&1 < /dev/null & echo $! > /tmp/sleeper');
    const stoppedBefore = (await events('instance.stopped')).length;
    const stopping = await t.api.post(`/v1/instances/${NAME}/stop`).set(bearer(key)).send({ snapshot: true });
    expect(stopping.status).toBe(202);
    expect(stopping.body).toMatchObject({ status: 'stopping', desired_state: 'stopped', session_saved: false });
    const after = await settled();
    expect(after).toMatchObject({ status: 'stopped', desired_state: 'stopped', session_saved: true });
    const stoppedEvents = await events('instance.stopped');
    expect(stoppedEvents).toHaveLength(stoppedBefore + 1);
    expect(stoppedEvents.at(-1)!.data).toMatchObject({ name: NAME, session_saved: true });
    expect(listQemuProcesses().filter((p) => p.machineId === id)).toEqual([]);
    expect(existsSync(join(t.config.dataDir, 'machines', id, 'memory.state'))).toBe(true);
  });

  it('upgrade of a stopped instance drops the saved session; the next start is a cold boot', async () => {
    const upgraded = await t.api.post(`/v1/instances/${NAME}/upgrade`).set(bearer(key));
    expect([200, 202]).toContain(upgraded.status);
    const after = await settled();
    expect(after).toMatchObject({ status: 'stopped', desired_state: 'stopped', session_saved: false });
    expect(existsSync(join(t.config.dataDir, 'machines', id, 'memory.state'))).toBe(false);
    expect(listQemuProcesses().filter((p) => p.machineId === id)).toEqual([]);

    const resuming = await t.api.post(`/v1/instances/${NAME}/resume`).set(bearer(key));
    expect(resuming.status).toBe(202);
    expect(resuming.body).toMatchObject({ status: 'starting', desired_state: 'running' });
    expect(await settled()).toMatchObject({ status: 'running', session_saved: false });
    expect((await events('instance.running')).at(-1)!.data).toMatchObject({ resumed: false });
    expect((await guest('cat /proc/sys/kernel/random/boot_id')).stdout.trim()).not.toBe(bootId); // booted, not resumed
    expect((await guest('kill -0 "$(cat /tmp/sleeper 2>/dev/null)" 2>/dev/null && echo alive || echo gone')).stdout.trim()).toBe('gone');
    expect((await guest('cat /root/kept')).stdout).toBe('kept\n');
  });

  it('a plain stop past the wait bound answers 202 and ends stopped without a session', async () => {
    const stoppedBefore = (await events('instance.stopped')).length;
    const stopping = await t.api.post(`/v1/instances/${NAME}/stop`).set(bearer(key));
    expect(stopping.status).toBe(202);
    expect(stopping.body).toMatchObject({ status: 'stopping', desired_state: 'stopped' });
    expect(await settled()).toMatchObject({ status: 'stopped', session_saved: false });
    const stoppedEvents = await events('instance.stopped');
    expect(stoppedEvents).toHaveLength(stoppedBefore + 1);
    expect(stoppedEvents.at(-1)!.data).toMatchObject({ session_saved: false });
    expect(listQemuProcesses().filter((p) => p.machineId === id)).toEqual([]);

    const deleted = await t.api.delete(`/v1/instances/${NAME}`).set(bearer(key));
    expect([200, 202]).toContain(deleted.status);
    await waitUntil('the row to be gone', async () => (await t.services.database.prisma.instance.count({ where: { id } })) === 0);
    await t.api.get(`/v1/instances/${NAME}`).set(bearer(key)).expect(404);
    expect(await events('instance.deleted')).toHaveLength(1);
    expect(existsSync(join(t.config.dataDir, 'machines', id))).toBe(false);
  });
});
