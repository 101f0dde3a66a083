// QEMU processes for real, with the tiny guest: detached start, re-adoption after the service died,
// graceful and forced stop, kill, and orphan reaping.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildQemuArgs } from '../../src/compute/qemu/command-line';
import { QmpBusyError } from '../../src/compute/qemu/qmp-client';
import { adoptMachine, findOwnProcess, killMachine, listQemuProcesses, MachineStartError, processAlive, reapOrphans, startMachine, stopMachine } from '../../src/compute/qemu/qemu-process';
import { pollUntil } from '../../src/compute/qemu/wait';
import { agentRequest, describeWithQemu, makeMachine, makeRoot, serialText, TestRoot, ticks, waitForSerial } from './support/machines';
import { READY_MARKER } from './support/tiny-guest';

jest.setTimeout(120_000);

const ROOT = join(__dirname, '../..');

describeWithQemu('QEMU machine processes', () => {
  let t: TestRoot;
  beforeAll(async () => {
    t = await makeRoot();
  });
  afterAll(() => t.cleanup());

  test('starts detached, answers on QMP, boots the guest, and the agent port is wired', async () => {
    const spec = await makeMachine(t, 'm-start');
    const started = Date.now();
    const machine = await startMachine(spec);
    const qmpMs = Date.now() - started;
    const bootMs = qmpMs + (await waitForSerial(spec, READY_MARKER));
    console.log(`tiny guest (${spec.accelerator}): QMP up after ${qmpMs} ms, /init marker after ${bootMs} ms`);

    expect(await machine.status()).toBe('running');
    expect(machine.qmp.greeting?.version.qemu.major).toBeGreaterThanOrEqual(7);
    expect(Number(readFileSync(spec.pidFile, 'utf8'))).toBe(machine.pid);
    // Own session (setsid): no signal to the service's process group or terminal reaches QEMU.
    const stat = readFileSync(`/proc/${machine.pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    expect(Number(fields[3])).toBe(machine.pid); // session id (field 6) = its own pid
    expect(await agentRequest(spec, 'ping', /^pong$/)).toContain('pong');

    await killMachine(machine);
  });

  test('survives the death of the service and is adopted through the pid file and QMP', async () => {
    const spec = await makeMachine(t, 'm-adopt');
    // A separate process plays the service: it starts the machine, then dies by kill -9.
    const service = spawn(process.execPath, [require.resolve('tsx/cli'), join(__dirname, 'support/start-machine-process.ts'), JSON.stringify(spec)], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true, // its own process group: tsx runs the script in a child, kill -9 takes both
    });
    let output = '';
    service.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    service.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise((resolve) => service.on('exit', resolve));
    const pid = await new Promise<number>((resolve, reject) => {
      const timer = setInterval(() => {
        const m = /started (\d+)/.exec(output);
        if (m) {
          clearInterval(timer);
          resolve(Number(m[1]));
        } else if (service.exitCode !== null) {
          clearInterval(timer);
          reject(new Error(`service process failed: ${output}`));
        }
      }, 20);
    });
    await waitForSerial(spec, READY_MARKER);

    // While the old service still holds the monitor, a second client gets no greeting.
    await expect(adoptMachine(spec, { greetingTimeoutMs: 500 })).rejects.toBeInstanceOf(QmpBusyError);

    process.kill(-service.pid!, 'SIGKILL'); // the whole service process group; QEMU has its own session
    await exited;
    expect(processAlive(pid)).toBe(true);
    const machine = await adoptMachine(spec);
    expect(machine?.pid).toBe(pid);
    expect(await machine!.status()).toBe('running');

    // Our own client "dies" (connection dropped without a goodbye): a new client adopts again.
    machine!.qmp.destroy();
    const again = await adoptMachine(spec);
    expect(await again!.status()).toBe('running');
    const before = ticks(spec).length;
    expect(await pollUntil(() => (ticks(spec).length > before ? true : undefined), 5000)).toBe(true); // guest still ticking
    await killMachine(again!);
  });

  test('does not adopt a pid that is not this machine’s QEMU', async () => {
    const spec = await makeMachine(t, 'm-foreign');
    writeFileSync(spec.pidFile, String(process.pid)); // alive, but jest, not QEMU
    expect(findOwnProcess(spec)).toBeUndefined();
    expect(await adoptMachine(spec)).toBeUndefined();
    writeFileSync(spec.pidFile, '999999999');
    expect(await adoptMachine(spec)).toBeUndefined();
  });

  test('stops gracefully with the ACPI power button', async () => {
    const spec = await makeMachine(t, 'm-graceful');
    const machine = await startMachine(spec);
    await waitForSerial(spec, 'kiste-agent-port'); // the power-button watcher runs from here on
    const shutdown = machine.qmp.waitForEvent('SHUTDOWN');
    const started = Date.now();
    expect(await stopMachine(machine, { powerdownTimeoutMs: 20_000 })).toBe('powerdown');
    console.log(`graceful stop (system_powerdown → exit): ${Date.now() - started} ms`);
    expect((await shutdown).data).toMatchObject({ guest: true });
    expect(processAlive(machine.pid)).toBe(false);
    expect(serialText(spec)).toContain('kiste-powerdown');
    // A clean exit leaves no pid file and no sockets behind.
    for (const path of [spec.pidFile, spec.qmpSocket, spec.agentSocket]) expect(existsSync(path)).toBe(false);
  });

  test('falls back to quit when the guest ignores the power button', async () => {
    const spec = await makeMachine(t, 'm-forced', { extraAppend: 'kiste.ignore_powerdown' });
    const machine = await startMachine(spec);
    await waitForSerial(spec, 'kiste-agent-port');
    expect(await stopMachine(machine, { powerdownTimeoutMs: 1500 })).toBe('quit');
    expect(processAlive(machine.pid)).toBe(false);
  });

  test('kill leaves no process and no runtime files', async () => {
    const spec = await makeMachine(t, 'm-kill');
    const machine = await startMachine(spec);
    await killMachine(machine);
    expect(processAlive(machine.pid)).toBe(false);
    expect(listQemuProcesses().some((p) => p.pid === machine.pid)).toBe(false);
    for (const path of [spec.pidFile, spec.qmpSocket, spec.agentSocket]) expect(existsSync(path)).toBe(false);
    // and a stopped machine can start again in the same directory
    const again = await startMachine(spec);
    expect(await again.status()).toBe('running');
    await killMachine(again);
  });

  test('refuses a second QEMU for a running machine, and reports startup failures with QEMU’s words', async () => {
    const spec = await makeMachine(t, 'm-twice');
    const machine = await startMachine(spec);
    await expect(startMachine(spec)).rejects.toThrow(/already running/);
    await killMachine(machine);

    const broken = await makeMachine(t, 'm-broken');
    await expect(startMachine({ ...broken, kernel: join(t.root, 'no-such-kernel') })).rejects.toThrow(MachineStartError);
    await expect(startMachine({ ...broken, kernel: join(t.root, 'no-such-kernel') })).rejects.toThrow(/no-such-kernel/);
  });

  test('reaps QEMUs whose machine directory is gone, and only those', async () => {
    const kept = await makeMachine(t, 'm-kept');
    const orphan = await makeMachine(t, 'm-orphan');
    const keptMachine = await startMachine(kept);
    const orphanMachine = await startMachine(orphan);
    await orphanMachine.detach();
    rmSync(join(t.root, 'm-orphan'), { recursive: true, force: true }); // machine deleted, QEMU left over

    const reaped = await reapOrphans({ machinesRoot: t.root });
    expect(reaped.map((r) => r.machineId)).toEqual(['m-orphan']);
    expect(processAlive(orphanMachine.pid)).toBe(false);
    expect(processAlive(keptMachine.pid)).toBe(true);
    // Another root sees none of ours.
    expect(await reapOrphans({ machinesRoot: join(t.root, 'elsewhere') })).toEqual([]);
    await killMachine(keptMachine);
  });

  test('the command line carries the identity that adoption and reaping rely on', async () => {
    const spec = await makeMachine(t, 'm-args');
    const args = buildQemuArgs(spec);
    expect(args.slice(0, 2)).toEqual(['-name', 'kiste-m-args']);
    expect(args).toContain(spec.pidFile);
  });
});
