// CPU and memory limits per machine, from cgroups: v2 (the unified hierarchy of ordinary hosts) or
// v1 (cpu, memory and pids controllers mounted apart, as on the development hosts), whichever this
// host has and lets us write. Every machine gets a group `kiste/<id>`:
//   CPU    weight in proportion to its vcpu (v2 cpu.weight 100 per vcpu, v1 cpu.shares 1024 per
//          vcpu) and a quota of vcpu + 0.5 CPUs (the half for QEMU's own threads: main loop, I/O,
//          the user-mode network), so a busy machine cannot take its neighbours' CPUs;
//   memory a ceiling of memory_mib plus QEMU's overhead (see MEMORY_OVERHEAD_MIB);
//   pids   at most MAX_TASKS threads (QEMU cannot fork: its seccomp sandbox denies it).
// Where no hierarchy is writable (a container without delegation), machines run without limits
// and the service says so at start (MachineLimits.mode.reason). The host's helpers that work on a
// guest's behalf (video encoders, encoder-jail.ts) get groups of their own below `kiste` the same way.
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { shellQuote } from '../../shell-quote';
import { TCG_CODE_CACHE_MIB } from '../qemu/command-line';

/** QEMU beside guest RAM: its own heap, device models, the user network, and TCG's code cache. */
export const MEMORY_OVERHEAD_MIB = 256 + TCG_CODE_CACHE_MIB;
const MAX_TASKS = 512;
const CPU_PERIOD_US = 100_000;
const GROUP = 'kiste';

export type CgroupMode =
  | { kind: 'v2'; root: string }
  | { kind: 'v1'; cpu: string; memory: string; pids: string | null }
  | { kind: 'none'; reason: string };

export interface MachineShapeLimits {
  vcpu: number;
  memoryMib: number;
}

/** What a group's tasks may use together; null: no limit of its own (its parent's still holds). */
export interface GroupLimits {
  /** CPU weight against its siblings, 1 = the default (v2 cpu.weight 100, v1 cpu.shares 1024). */
  share: number;
  /** At most this many CPUs (a quota per period). */
  cpus: number | null;
  memoryBytes: number | null;
  tasks: number | null;
}

/** Which cgroup hierarchy this host offers us, after making (or finding) the `kiste` group. */
export function detectCgroups(base = '/sys/fs/cgroup'): CgroupMode {
  try {
    if (existsSync(join(base, 'cgroup.controllers'))) {
      const available = readFileSync(join(base, 'cgroup.controllers'), 'utf8').split(/\s+/);
      const missing = ['cpu', 'memory', 'pids'].filter((name) => !available.includes(name));
      if (missing.length) return { kind: 'none', reason: `cgroup v2 without the ${missing.join(', ')} controller(s)` };
      const root = join(base, GROUP);
      writeFileSync(join(base, 'cgroup.subtree_control'), '+cpu +memory +pids');
      mkdirSync(root, { recursive: true });
      writeFileSync(join(root, 'cgroup.subtree_control'), '+cpu +memory +pids');
      return { kind: 'v2', root };
    }
    const cpu = join(base, 'cpu');
    const memory = join(base, 'memory');
    if (existsSync(join(cpu, 'cpu.shares')) && existsSync(join(memory, 'memory.limit_in_bytes'))) {
      const pids = existsSync(join(base, 'pids', 'pids.max')) ? join(base, 'pids', GROUP) : null;
      for (const dir of [join(cpu, GROUP), join(memory, GROUP), ...(pids ? [pids] : [])]) mkdirSync(dir, { recursive: true });
      return { kind: 'v1', cpu: join(cpu, GROUP), memory: join(memory, GROUP), pids };
    }
    return { kind: 'none', reason: `no cgroup v2 or v1 cpu and memory hierarchy under ${base}` };
  } catch (error) {
    return { kind: 'none', reason: `cgroups are not writable here (${(error as Error).message})` };
  }
}

export class MachineLimits {
  constructor(readonly mode: CgroupMode) {}

  /**
   * Makes the machine's group with its limits (again, if a stale one is there) and returns the
   * files its QEMU's pid must be written to before QEMU runs.
   */
  apply(id: string, shape: MachineShapeLimits): string[] {
    return applyGroup(this.mode, id, {
      share: shape.vcpu,
      cpus: shape.vcpu + 0.5,
      memoryBytes: (shape.memoryMib + MEMORY_OVERHEAD_MIB) * 1048576,
      tasks: MAX_TASKS,
    });
  }

  /**
   * Removes the machine's groups once its QEMU is gone. A QEMU just killed may still be a task of
   * them until its parent has reaped it: what is left is tried once more a little later.
   */
  remove(id: string, retry = true): void {
    removeGroup(this.mode, id, retry);
  }
}

/**
 * Makes the group `kiste/<path>` (again, if a stale one is there; its parents must exist) with these
 * limits; the cgroup.procs files a process must be written to, to be held by them.
 */
export function applyGroup(mode: CgroupMode, path: string, limits: GroupLimits): string[] {
  cancelLaterRemoval(mode, path);
  const quota = limits.cpus === null ? null : `${Math.round(limits.cpus * CPU_PERIOD_US)}`;
  if (mode.kind === 'v2') {
    const dir = ensure(join(mode.root, path));
    write(dir, 'cpu.weight', String(Math.max(1, Math.min(10_000, Math.round(100 * limits.share)))));
    write(dir, 'cpu.max', `${quota ?? 'max'} ${CPU_PERIOD_US}`);
    write(dir, 'memory.max', String(limits.memoryBytes ?? 'max'));
    if (existsSync(join(dir, 'memory.swap.max'))) write(dir, 'memory.swap.max', '0'); // only with swap accounting
    write(dir, 'pids.max', String(limits.tasks ?? 'max'));
    return [join(dir, 'cgroup.procs')];
  }
  if (mode.kind === 'v1') {
    const cpu = ensure(join(mode.cpu, path));
    write(cpu, 'cpu.shares', String(Math.max(2, Math.round(1024 * limits.share))));
    write(cpu, 'cpu.cfs_period_us', String(CPU_PERIOD_US));
    write(cpu, 'cpu.cfs_quota_us', quota ?? '-1');
    const memory = ensure(join(mode.memory, path));
    write(memory, 'memory.limit_in_bytes', String(limits.memoryBytes ?? -1));
    const procs = [join(cpu, 'cgroup.procs'), join(memory, 'cgroup.procs')];
    if (mode.pids) {
      const pids = ensure(join(mode.pids, path));
      write(pids, 'pids.max', String(limits.tasks ?? 'max'));
      procs.push(join(pids, 'cgroup.procs'));
    }
    return procs;
  }
  return [];
}

/** Like applyGroup, for a group whose tasks live in groups below it (v2 hands its controllers down to them). */
export function applyParentGroup(mode: CgroupMode, path: string, limits: GroupLimits): void {
  applyGroup(mode, path, limits);
  if (mode.kind === 'v2') write(join(mode.root, path), 'cgroup.subtree_control', '+cpu +memory +pids');
}

/**
 * Removals tried again later, by group: a group made again in the meantime (a machine started
 * right after its QEMU was killed) must not lose its folder between being made and being joined.
 */
const laterRemovals = new Map<string, NodeJS.Timeout>();
const removalKey = (mode: CgroupMode, path: string) => `${JSON.stringify(mode)}\n${path}`;

function cancelLaterRemoval(mode: CgroupMode, path: string): void {
  const key = removalKey(mode, path);
  clearTimeout(laterRemovals.get(key));
  laterRemovals.delete(key);
}

/**
 * Removes the group `kiste/<path>` (empty once its tasks are gone); what is still busy is tried
 * again in 2 s when `retry`, unless the group is made again before then.
 */
export function removeGroup(mode: CgroupMode, path: string, retry = true): void {
  cancelLaterRemoval(mode, path);
  const dirs = mode.kind === 'v2' ? [join(mode.root, path)] : mode.kind === 'v1' ? [mode.cpu, mode.memory, ...(mode.pids ? [mode.pids] : [])].map((root) => join(root, path)) : [];
  let left = false;
  for (const dir of dirs) {
    try {
      rmdirSync(dir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') left = true;
    }
  }
  if (!left || !retry) return;
  const key = removalKey(mode, path);
  const timer = setTimeout(() => {
    laterRemovals.delete(key);
    removeGroup(mode, path, false);
  }, 2000);
  timer.unref();
  laterRemovals.set(key, timer);
}

/**
 * A command line that puts its own process into the groups of these cgroup.procs files, then
 * becomes `command`: the limits hold from the command's first instruction.
 */
export function inGroups(procs: string[], command: string, args: string[]): { command: string; args: string[] } {
  if (procs.length === 0) return { command, args };
  const join_ = procs.map((file) => `echo $$ > ${shellQuote(file)} || exit 125; `).join('');
  return { command: '/bin/sh', args: ['-c', `${join_}exec "$@"`, 'kiste-cgroup', command, ...args] };
}

function ensure(dir: string): string {
  mkdirSync(dir, { recursive: true });
  return dir;
}

function write(dir: string, file: string, value: string): void {
  writeFileSync(join(dir, file), value);
}
