// Memory sessions for real: save a running tiny guest to a file (QEMU gone), restore it, and check
// that the guest continues (its counter goes on from where it was instead of starting at 0), with
// anonymous RAM and with file-backed RAM (x-ignore-shared). Prints the measured times.
import { existsSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { restoreMemory, saveMemory } from '../../src/compute/qemu/memory-session';
import { killMachine, processAlive, startMachine } from '../../src/compute/qemu/qemu-process';
import { pollUntil } from '../../src/compute/qemu/wait';
import { agentRequest, describeWithQemu, makeMachine, makeRoot, serialText, TestRoot, ticks, waitForSerial } from './support/machines';
import { READY_MARKER } from './support/tiny-guest';

jest.setTimeout(120_000);

describeWithQemu('memory sessions', () => {
  let t: TestRoot;
  beforeAll(async () => {
    t = await makeRoot();
  });
  afterAll(() => t.cleanup());

  for (const fileBackedMemory of [false, true]) {
    const mode = fileBackedMemory ? 'file-backed RAM + x-ignore-shared' : 'anonymous RAM';
    test(`save and restore with ${mode}: the guest continues where it was`, async () => {
      const spec = await makeMachine(t, fileBackedMemory ? 'm-mem-file' : 'm-mem-anon', { fileBackedMemory, memoryMib: 256 });
      const machine = await startMachine(spec);
      await waitForSerial(spec, /kiste-tick 5\b/);
      if (fileBackedMemory) expect(statSync(spec.memoryFile!).size).toBe(256 * 1024 * 1024);

      const stateFile = join(t.root, `${spec.id}.state`);
      const saved = await saveMemory(machine, { stateFile });
      const lastBefore = Math.max(...ticks(spec));
      expect(processAlive(machine.pid)).toBe(false);
      expect(existsSync(stateFile)).toBe(true);
      expect(existsSync(`${stateFile}.part`)).toBe(false);
      expect(saved.ignoreShared).toBe(fileBackedMemory);
      if (fileBackedMemory) expect(saved.stateBytes).toBeLessThan(4 * 1024 * 1024); // device state only
      else expect(saved.stateBytes).toBeGreaterThan(16 * 1024 * 1024); // the guest's RAM is in it

      const { machine: restored, restoreMs } = await restoreMemory(spec, { stateFile });
      console.log(
        `${mode}: state ${(saved.stateBytes / 1024).toFixed(0)} KiB, save ${saved.saveMs} ms (with QEMU exit ${saved.totalMs} ms), restore ${restoreMs} ms (spawn to running)`,
      );
      expect(await restored.status()).toBe('running');
      // The counter goes on from the saved value: same boot, no second /init.
      const resumed = await pollUntil(() => (Math.max(...ticks(spec)) > lastBefore + 2 ? true : undefined), 15_000);
      expect(resumed).toBe(true);
      const all = ticks(spec);
      expect(all.filter((n) => n === 0)).toHaveLength(1);
      for (let i = 1; i < all.length; i++) expect(all[i]).toBe(all[i - 1] + 1);
      expect(serialText(spec).split(READY_MARKER)).toHaveLength(2);
      // Devices came back too: the agent port still answers.
      expect(await agentRequest(spec, 'ping', /^pong$/)).toContain('pong');
      await killMachine(restored);
    });
  }

  test('a failed restore reports the failure and leaves no QEMU', async () => {
    const spec = await makeMachine(t, 'm-mem-bad');
    await expect(restoreMemory(spec, { stateFile: join(t.root, 'missing.state') })).rejects.toThrow(/no saved session/);
    const garbage = join(t.root, 'garbage.state');
    writeFileSync(garbage, 'not a migration stream');
    await expect(restoreMemory(spec, { stateFile: garbage, timeoutMs: 20_000 })).rejects.toThrow(/restore of m-mem-bad failed/);
    expect(existsSync(spec.pidFile)).toBe(false);
  });
});
