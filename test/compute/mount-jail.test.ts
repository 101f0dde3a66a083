// A machine's file view (mount-jail.ts) on the real kernel, as root, without QEMU: the command the
// view runs is a shell that looks around and writes to the serial log's path as a QEMU would.
import { execFile } from 'node:child_process';
import { chownSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inMountJail, linkLayer, mountJailProblem, prepareSerialLog, SERIAL_LOG_KEEP_BYTES, SERIAL_LOG_MAX_BYTES, SERIAL_LOG_MIN_ROOM_BYTES, showLayers, type QemuView } from '../../src/compute/jail/mount-jail';

jest.setTimeout(60_000);

const USER = { uid: 3_999_001, gid: 3_999_000 };

function run(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(argv[0]!, argv.slice(1), { env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' }, maxBuffer: 1 << 20 }, (error, stdout, stderr) =>
      resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe("a machine's own file view", () => {
  let root: string;
  let layersDir: string;
  let imagesDir: string;
  let machineDir: string;
  let view: QemuView;

  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'kiste-mount-jail-test-'));
    layersDir = join(root, 'data', 'layers');
    imagesDir = join(root, 'images', 'v1');
    machineDir = join(root, 'data', 'machines', 'm');
    for (const dir of [layersDir, imagesDir, join(machineDir, 'run'), join(machineDir, 'jail-root'), join(root, 'data', 'machines', 'other', 'run')]) mkdirSync(dir, { recursive: true });
    for (const [file, text] of [[join(layersDir, 'm-0.qcow2'), 'own'], [join(layersDir, 'other-0.qcow2'), 'other'], [join(imagesDir, 'vmlinuz'), 'kernel'], [join(imagesDir, 'secret'), 'no']]) writeFileSync(file, text);
    chownSync(join(layersDir, 'm-0.qcow2'), USER.uid, USER.gid);
    const serialLog = join(machineDir, 'run', 'serial.log');
    view = {
      root: join(machineDir, 'jail-root'), run: join(machineDir, 'run'), layers: { view: join(machineDir, 'layers'), at: layersDir },
      readOnly: [join(imagesDir, 'vmlinuz')], serialLog, user: USER,
    };
    showLayers(view.layers.view, layersDir, [join(layersDir, 'm-0.qcow2')]);
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('holds only its own files, a /proc of its own processes, and runs as its user', async () => {
    prepareSerialLog(view.serialLog, USER);
    const script = [
      'id -u; id -g',
      'ls -A /',
      `cat ${layersDir}/m-0.qcow2; echo`,
      `ls -A ${layersDir} 2>/dev/null || echo layers-not-listable`,
      `test -e ${layersDir}/other-0.qcow2 && echo other-layer-visible || echo other-layer-hidden`,
      `ls -A ${join(root, 'images', 'v1')}`,
      `test -e ${join(root, 'data', 'machines', 'other')} && echo other-machine-visible || echo other-machine-hidden`,
      `echo tampered > ${join(imagesDir, 'vmlinuz')} 2>/dev/null && echo image-writable || echo image-read-only`,
      'for p in /proc/[0-9]*; do stat -c %u $p; done | sort -u | tr "\\n" " "; echo',
      'test -e /proc/sys && echo proc-sys || echo no-proc-sys',
      'readlink /proc/self/ns/mnt',
    ].join('\n');
    const result = await run(inMountJail(view, '/bin/sh', ['-c', script]));
    expect(result).toMatchObject({ code: 0 });
    const lines = result.stdout.trim().split('\n');
    expect(lines.slice(0, 2)).toEqual([String(USER.uid), String(USER.gid)]);
    expect(result.stdout).toContain('own\nlayers-not-listable\nother-layer-hidden\nvmlinuz\n'); // its layer by name, and of the images only its kernel
    expect(result.stdout).toContain('other-machine-hidden');
    expect(result.stdout).toContain('image-read-only');
    expect(result.stdout).toContain('no-proc-sys');
    expect(lines.at(-3)).toBe(`${USER.uid} `); // of the host's many processes, its user's alone
    expect(lines.at(-1)).not.toBe(await run(['readlink', '/proc/self/ns/mnt']).then((r) => r.stdout.trim()));
    expect(readFileSync(join(imagesDir, 'vmlinuz'), 'utf8')).toBe('kernel');
  });

  it('writes the serial log as it comes, and stops it at its cap: what is written past it is drained and dropped', async () => {
    writeFileSync(view.serialLog, 'x'.repeat(SERIAL_LOG_MAX_BYTES - SERIAL_LOG_MIN_ROOM_BYTES));
    prepareSerialLog(view.serialLog, USER);
    expect(statSync(view.serialLog).size).toBe(SERIAL_LOG_MAX_BYTES - SERIAL_LOG_MIN_ROOM_BYTES); // room enough: left as it was
    // a short line is in the log while its writer still runs (nothing held back in a buffer); then
    // the command writes three times the room left to the log's path, as a guest looping on ttyS0 would
    // (looked at by the clock, not after a fixed delay: on a loaded host the jail takes a while to start)
    const script = `echo booted > ${view.serialLog}; sleep 3; head -c ${3 * SERIAL_LOG_MIN_ROOM_BYTES} /dev/zero > ${view.serialLog}; echo written`;
    let writerDone = false;
    const running = run(inMountJail(view, '/bin/sh', ['-c', script])).finally(() => (writerDone = true));
    let seenWhileWriting = false;
    while (!writerDone && !seenWhileWriting) {
      seenWhileWriting = readFileSync(view.serialLog, 'utf8').endsWith('booted\n') && !writerDone;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(seenWhileWriting).toBe(true);
    expect(await running).toMatchObject({ code: 0, stdout: 'written\n' });
    // the copier's last write may land just after the writer ended
    for (const deadline = Date.now() + 5_000; statSync(view.serialLog).size < SERIAL_LOG_MAX_BYTES && Date.now() < deadline; ) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(statSync(view.serialLog).size).toBe(SERIAL_LOG_MAX_BYTES);
    expect(lstatSync(view.serialLog).isFile()).toBe(true);
  });

  it('cuts a serial log near its cap to its last lines before a start, and replaces anything but a file', () => {
    writeFileSync(view.serialLog, `${'old line\n'.repeat(SERIAL_LOG_MAX_BYTES / 9)}last line\n`);
    prepareSerialLog(view.serialLog, USER);
    const kept = readFileSync(view.serialLog, 'utf8');
    expect(kept.length).toBeLessThanOrEqual(SERIAL_LOG_KEEP_BYTES);
    expect(kept.startsWith('old line\n') && kept.endsWith('last line\n')).toBe(true);
    expect(statSync(view.serialLog)).toMatchObject({ uid: USER.uid, gid: USER.gid });
    rmSync(view.serialLog);
    mkdirSync(view.serialLog);
    prepareSerialLog(view.serialLog, USER);
    expect(lstatSync(view.serialLog)).toMatchObject({ size: 0, uid: USER.uid });
    expect(lstatSync(view.serialLog).isFile()).toBe(true);
  });

  it('keeps the layer view to exactly the chain: hard links, added while running, pruned after', () => {
    linkLayer(view.layers.view, layersDir, join(layersDir, 'other-0.qcow2'));
    expect(statSync(join(view.layers.view, 'other-0.qcow2')).ino).toBe(statSync(join(layersDir, 'other-0.qcow2')).ino);
    showLayers(view.layers.view, layersDir, [join(layersDir, 'm-0.qcow2')]);
    expect(() => statSync(join(view.layers.view, 'other-0.qcow2'))).toThrow();
    expect(statSync(join(view.layers.view, 'm-0.qcow2')).ino).toBe(statSync(join(layersDir, 'm-0.qcow2')).ino);
    expect(() => linkLayer(view.layers.view, layersDir, join(imagesDir, 'secret'))).toThrow(/not a layer/);
  });

  it('says when the host can build views', async () => {
    expect(await mountJailProblem({ machines: join(root, 'data', 'machines'), layers: layersDir }, USER.gid)).toBeNull();
  });
});
