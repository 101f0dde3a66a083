// qcow2 chains for real: overlays, a live fork of a running machine's disk, dirty bitmaps that
// notice guest writes, and compaction of a grown chain.
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DISK_NODE } from '../../src/compute/qemu/command-line';
import {
  activeLayer,
  addDirtyBitmap,
  backingChain,
  chainNodes,
  clearDirtyBitmap,
  commitIntoBase,
  createDisk,
  createOverlay,
  dirtyBitmapCount,
  liveFork,
  rebaseOffline,
  snapshotActive,
  streamIntoActive,
} from '../../src/compute/qemu/disks';
import { startMachine, stopMachine } from '../../src/compute/qemu/qemu-process';
import { pollUntil } from '../../src/compute/qemu/wait';
import { agentRequest, describeWithQemu, makeMachine, makeRoot, TestRoot, waitForSerial } from './support/machines';

jest.setTimeout(120_000);

const MiB = 1024 * 1024;

/** Reads `length` bytes at `offset` of what a guest would see on the disk (through its whole chain). */
function guestBytes(image: string, offset: number, length: number, dir: string): Buffer {
  const raw = join(dir, `read-${Date.now()}.raw`);
  execFileSync('qemu-img', ['convert', '-U', '-O', 'raw', image, raw]);
  const data = readFileSync(raw);
  rmSync(raw);
  return data.subarray(offset, offset + length);
}

describeWithQemu('qcow2 disks', () => {
  let t: TestRoot;
  beforeAll(async () => {
    t = await makeRoot();
  });
  afterAll(() => t.cleanup());

  test('overlays are instant copy-on-write layers; a fork of a stopped disk is independent', async () => {
    const base = join(t.root, 'img-base.qcow2');
    await createDisk(base, 32 * MiB);
    const a = join(t.root, 'a.qcow2');
    const b = join(t.root, 'b.qcow2');
    await createOverlay(base, a, { sizeBytes: 64 * MiB });
    // write into a (as a guest would), then fork it
    execFileSync('qemu-io', ['-f', 'qcow2', '-c', 'write -P 0xab 0 1M', a], { stdio: 'pipe' });
    await createOverlay(a, b);
    execFileSync('qemu-io', ['-f', 'qcow2', '-c', 'write -P 0xcd 0 4k', b], { stdio: 'pipe' });

    const chain = await backingChain(b);
    expect(chain.map((i) => i.filename)).toEqual([b, a, base]);
    expect(chain[0]['virtual-size']).toBe(64 * MiB); // the overlay's size, bigger than the base
    expect(chain[0]['actual-size']).toBeLessThan(2 * MiB); // sparse: only what was written
    expect(guestBytes(a, 0, 1, t.root)[0]).toBe(0xab); // the fork's write did not reach a
    expect(guestBytes(b, 0, 1, t.root)[0]).toBe(0xcd);
    expect(guestBytes(b, 8192, 1, t.root)[0]).toBe(0xab); // b sees a's data below its own
  });

  test('live fork of a running machine: the source moves to a new top, the fork shares the frozen layer', async () => {
    const spec = await makeMachine(t, 'm-fork');
    const machine = await startMachine(spec);
    await waitForSerial(spec, 'kiste-agent-port');
    const forkFile = join(t.root, 'fork.qcow2');
    const newActive = join(t.root, 'm-fork', 'disk.1.qcow2');

    const started = Date.now();
    const result = await liveFork(machine.qmp, { newActiveFile: newActive, newActiveNode: 'disk0-1', forkFile });
    console.log(`live fork of a running disk: ${Date.now() - started} ms`);

    expect(result.frozen).toEqual({ node: DISK_NODE, file: spec.disk });
    expect(result.active).toEqual({ node: 'disk0-1', file: newActive });
    expect((await backingChain(newActive)).map((i) => i.filename)).toEqual([newActive, spec.disk, t.baseDisk]);
    expect((await backingChain(forkFile)).map((i) => i.filename)).toEqual([forkFile, spec.disk, t.baseDisk]);

    // The guest writes after the fork: the source's new top changes, the fork does not.
    await agentRequest(spec, 'write', /^wrote$/);
    await stopMachine(machine, { powerdownTimeoutMs: 0 }); // quit: QEMU writes back its qcow2 metadata
    const forkView = guestBytes(forkFile, 0, 65536, t.root);
    expect(forkView.equals(Buffer.alloc(65536))).toBe(true); // the fork still sees the disk as it was
    expect(guestBytes(newActive, 0, 65536, t.root).equals(forkView)).toBe(false);
  });

  test('active commit folds a checkpoint layer back into the layer below it', async () => {
    const spec = await makeMachine(t, 'm-commit');
    const machine = await startMachine(spec);
    await waitForSerial(spec, 'kiste-agent-port');
    const { frozen, active } = await snapshotActive(machine.qmp, { newFile: join(t.root, 'm-commit', 'disk.1.qcow2'), newNode: 'disk0-1' });
    await agentRequest(spec, 'write', /^wrote$/); // lands in disk.1
    await commitIntoBase(machine.qmp, { jobId: 'commit-1', topNode: active.node, baseNode: frozen.node });
    expect(await activeLayer(machine.qmp)).toEqual(frozen); // the guest writes to disk.qcow2 again
    expect((await chainNodes(machine.qmp)).map((c) => c.file)).toEqual([spec.disk, t.baseDisk]);
    await stopMachine(machine, { powerdownTimeoutMs: 0 });
    expect(guestBytes(spec.disk, 0, 65536, t.root).equals(Buffer.alloc(65536))).toBe(false); // the write was committed
  });

  test('a dirty bitmap goes from 0 to >0 when the guest writes /dev/vda, and clears', async () => {
    const spec = await makeMachine(t, 'm-dirty');
    const machine = await startMachine(spec);
    await waitForSerial(spec, 'kiste-agent-port');
    const { node } = await activeLayer(machine.qmp);
    await addDirtyBitmap(machine.qmp, { node, name: 'checkpoint' });
    expect(await dirtyBitmapCount(machine.qmp, { node, name: 'checkpoint' })).toBe(0);

    await agentRequest(spec, 'write', /^wrote$/); // busybox dd of 64 KiB to /dev/vda, fsync
    const dirty = await pollUntil(async () => {
      const count = await dirtyBitmapCount(machine.qmp, { node, name: 'checkpoint' });
      return count && count > 0 ? count : undefined;
    }, 10_000);
    expect(dirty).toBeGreaterThanOrEqual(64 * 1024);

    await clearDirtyBitmap(machine.qmp, { node, name: 'checkpoint' });
    expect(await dirtyBitmapCount(machine.qmp, { node, name: 'checkpoint' })).toBe(0);
    expect(await dirtyBitmapCount(machine.qmp, { node, name: 'no-such-bitmap' })).toBeUndefined();
    await stopMachine(machine, { powerdownTimeoutMs: 0 });
  });

  test('compaction: two checkpoints grow the chain, block-stream folds it back onto the image', async () => {
    const spec = await makeMachine(t, 'm-compact');
    const machine = await startMachine(spec);
    await waitForSerial(spec, 'kiste-agent-port');
    await agentRequest(spec, 'write', /^wrote$/);
    await snapshotActive(machine.qmp, { newFile: join(t.root, 'm-compact', 'disk.1.qcow2'), newNode: 'disk0-1' });
    await agentRequest(spec, 'write', /^wrote$/);
    const { active } = await snapshotActive(machine.qmp, { newFile: join(t.root, 'm-compact', 'disk.2.qcow2'), newNode: 'disk0-2' });
    const chain = await chainNodes(machine.qmp);
    expect(chain.map((c) => c.file)).toEqual([active.file, join(t.root, 'm-compact', 'disk.1.qcow2'), spec.disk, t.baseDisk]);
    const expected = guestBytes(active.file, 0, 65536, t.root);

    // Keep the image's base disk (shared by every machine), fold the machine's own layers into the top.
    const imageBase = chain[chain.length - 1];
    await streamIntoActive(machine.qmp, { jobId: 'compact-1', baseNode: imageBase.node });
    expect((await chainNodes(machine.qmp)).map((c) => c.file)).toEqual([active.file, t.baseDisk]);
    // quit, not kill: QEMU writes its cached qcow2 metadata back on exit; only then does another
    // reader (qemu-img -U) see what the stream copied.
    await stopMachine(machine, { powerdownTimeoutMs: 0 });
    expect((await backingChain(active.file)).map((i) => i.filename)).toEqual([active.file, t.baseDisk]);
    expect(guestBytes(active.file, 0, 65536, t.root).equals(expected)).toBe(true);
    expect(expected.equals(Buffer.alloc(65536))).toBe(false);
  });

  test('offline compaction with qemu-img rebase keeps the data', async () => {
    const base = join(t.root, 'off-base.qcow2');
    const mid = join(t.root, 'off-mid.qcow2');
    const top = join(t.root, 'off-top.qcow2');
    await createDisk(base, 8 * MiB);
    await createOverlay(base, mid);
    execFileSync('qemu-io', ['-f', 'qcow2', '-c', 'write -P 0x5a 0 64k', mid], { stdio: 'pipe' });
    await createOverlay(mid, top);
    await rebaseOffline(top, base);
    writeFileSync(mid, ''); // the middle layer may go now
    expect((await backingChain(top)).map((i) => i.filename)).toEqual([top, base]);
    expect(guestBytes(top, 0, 1, t.root)[0]).toBe(0x5a);
  });
});
