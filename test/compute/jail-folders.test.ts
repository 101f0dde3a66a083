// The jail's folders on a real file system, as root: a folder it needs passage through that does not
// exist yet (a fresh data folder's images) is made, public and passable; one it cannot make is named
// with the real cause; and the host check is not held against the host forever: once the operator
// mends it, the next check after a few seconds passes without a restart.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { folderProblem, openJailFolders } from '../../src/compute/jail/jail-folders';
import { HostJail } from '../../src/compute/jail';
import { machineHostFolders } from '../../src/compute/qemu-machine-host';
import { testUidBase } from '../support/jail';

jest.setTimeout(60_000);

const GID = 1_879_048_192;
const acl = (path: string) => execFileSync('getfacl', ['-n', '--omit-header', path], { encoding: 'utf8' });

describe('the jail folders', () => {
  let root: string;

  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'kiste-jail-folders-'));
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('makes a missing pass-through folder 0755 and lets the jail group through every closed folder on the way', async () => {
    const data = join(root, 'data');
    const opened: string[][] = [];
    const problem = await openJailFolders({ own: [join(data, 'machines')], passThrough: [join(data, 'machines'), join(data, 'images')] }, GID, (folders) => opened.push(folders));
    expect(problem).toBeNull();
    expect(statSync(join(data, 'machines')).mode & 0o707).toBe(0o700); // group bits: the ACL mask (x)
    expect(statSync(join(data, 'images')).mode & 0o777).toBe(0o755);
    expect(acl(join(data, 'machines'))).toContain(`group:${GID}:--x`);
    expect(opened.flat()).toContain(join(data, 'machines'));
  });

  it('names a file in the way, not ACLs', async () => {
    writeFileSync(join(root, 'data'), 'not a folder');
    const problem = await openJailFolders({ own: [], passThrough: [join(root, 'data', 'images')] }, GID, () => undefined);
    expect(problem).toEqual({ reason: `${join(root, 'data', 'images')} or a folder on its way is a file, not a folder`, hint: expect.stringContaining('Move that file away') });
  });

  it.each([
    ['EACCES', 'may not create or change', 'root-squashed'],
    ['EROFS', 'is on a read-only file system', 'read-write'],
    ['ENOSPC', 'no space left', 'Free space'],
  ])('tells %s apart', (code, reason, hint) => {
    const problem = folderProblem('/srv/kiste/images', Object.assign(new Error(code), { code }));
    expect(problem.reason).toContain(reason);
    expect(problem.hint).toContain(hint);
    expect(problem.hint).not.toContain('ACL');
  });

  it('checks the host again after a failure, and keeps a pass', async () => {
    const data = join(root, 'data');
    const folders = machineHostFolders(data);
    const images = join(root, 'blocked', 'images');
    writeFileSync(join(root, 'blocked'), 'a file where a folder should be');
    const logs: string[] = [];
    const log = (message: string) => logs.push(message);
    const jail = new HostJail({
      machinesDir: folders.machines,
      layersDir: folders.layers,
      passThrough: [folders.machines, folders.layers, images],
      uidBase: testUidBase(),
      egress: { mode: 'public', allow: [] },
      logger: { info: (_o, m) => log(m), warn: (_o, m) => log(m), error: (_o, m) => log(m) },
    });
    try {
      expect((await jail.problem())?.reason).toContain('is a file, not a folder');
      expect((await jail.problem())?.reason).toContain('is a file, not a folder'); // held for a few seconds
      rmSync(join(root, 'blocked'));
      const mended = Date.now();
      let problem = await jail.problem();
      while (problem && Date.now() - mended < 10_000) {
        await new Promise((resolve) => setTimeout(resolve, 500));
        problem = await jail.problem();
      }
      expect(problem).toBeNull();
      expect(statSync(images).isDirectory()).toBe(true);
      expect(logs).toContain('machine jail ready: the host was mended, machines start again');
      // A passed check is not made again (this would fail it).
      rmSync(join(root, 'blocked'), { recursive: true });
      writeFileSync(join(root, 'blocked'), 'in the way again');
      await new Promise((resolve) => setTimeout(resolve, 5_500));
      expect(await jail.problem()).toBeNull();
    } finally {
      await jail.unloadFirewall();
    }
  });
});
