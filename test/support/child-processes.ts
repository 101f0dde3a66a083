// The children of a process as /proc shows them: for tests that a process leaves no helper behind.
import { readdirSync, readFileSync } from 'node:fs';

/** Pids of the live children of `pid` whose command name is `name` (a zombie is not live). */
export function childrenNamed(pid: number, name: string): number[] {
  return readdirSync('/proc').filter((entry) => /^\d+$/.test(entry)).filter((entry) => {
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const [state, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return comm === name && Number(ppid) === pid && state !== 'Z';
    } catch {
      return false;
    }
  }).map(Number);
}

/** True while the process exists and has not exited (a zombie has). */
export function processLive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}
