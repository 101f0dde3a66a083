// A machine's cgroup whose QEMU was just killed cannot be removed until that QEMU is reaped: the
// removal is tried again 2 s later. A machine started again within those 2 s makes the group anew,
// and the late removal must then leave it alone (it once removed the folder between the group being
// made and the new QEMU joining it: the start failed with "QEMU exited during startup (exit code
// 125)", found by the kill -9 recovery suite). A plain folder stands in for a cgroup hierarchy: its
// control files are ordinary files, and a folder with files cannot be removed, as a busy group cannot.
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { applyGroup, removeGroup, type CgroupMode } from '../../src/compute/jail/cgroups';

const LIMITS = { share: 1, cpus: 1.5, memoryBytes: 512 << 20, tasks: 512 };

describe('removing a machine cgroup that is still busy', () => {
  let base: string;
  let mode: CgroupMode;
  const groupDirs = () => [join(base, 'cpu', 'm1'), join(base, 'memory', 'm1')];
  /** What a reaped QEMU leaves: groups with no tasks (here: folders with no files), removable. */
  const reaped = () => groupDirs().forEach((dir) => readdirSync(dir).forEach((file) => rmSync(join(dir, file))));

  beforeEach(() => {
    jest.useFakeTimers();
    base = mkdtempSync(join(tmpdir(), 'kiste-cgroups-'));
    mode = { kind: 'v1', cpu: join(base, 'cpu'), memory: join(base, 'memory'), pids: null };
  });
  afterEach(() => {
    jest.useRealTimers();
    rmSync(base, { recursive: true, force: true });
  });

  it('tries again later and then removes the group once its tasks are gone', () => {
    applyGroup(mode, 'm1', LIMITS);
    removeGroup(mode, 'm1');
    expect(groupDirs().every((dir) => existsSync(dir))).toBe(true); // busy: left for later
    reaped();
    jest.advanceTimersByTime(2000);
    expect(groupDirs().some((dir) => existsSync(dir))).toBe(false);
  });

  it('leaves a group made again before the later try alone', () => {
    applyGroup(mode, 'm1', LIMITS);
    removeGroup(mode, 'm1');
    reaped();
    const procs = applyGroup(mode, 'm1', LIMITS); // the machine starts again at once
    expect(jest.getTimerCount()).toBe(0);
    jest.advanceTimersByTime(2000);
    expect(procs.map((file) => existsSync(join(file, '..')))).toEqual([true, true]);
    expect(readdirSync(groupDirs()[1])).toContain('memory.limit_in_bytes');
  });
});
