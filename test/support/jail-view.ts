// What a machine's QEMU sees of the host, read as root from /proc and from inside its mount
// namespace (for tests of the jail's file view), and what access a jail user still has.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { pollUntil } from '../../src/compute/qemu/wait';

/** The mount namespace of a process (`mnt:[…]`). */
export function mountNamespace(pid: number | 'self'): string {
  return readlinkSync(`/proc/${pid}/ns/mnt`);
}

/** Whether a path exists in the process's own file view. */
export function seesPath(pid: number, path: string): boolean {
  return existsSync(join(`/proc/${pid}/root`, path));
}

/** Mount points of the process's namespace, with their file system options. */
export function mountsOf(pid: number): Array<{ point: string; type: string; options: string }> {
  return readFileSync(`/proc/${pid}/mountinfo`, 'utf8').trim().split('\n').map((line) => {
    const fields = line.split(' ');
    const rest = fields.slice(fields.indexOf('-') + 1);
    return { point: fields[4]!.replace(/\\040/g, ' '), type: rest[0]!, options: rest[2] ?? '' };
  });
}

/** The processes a user sees in /proc inside the process's namespace (as a taken-over QEMU would), with their owners. */
export function processesSeenAs(pid: number, user: { uid: number; gid: number }): Array<{ pid: number; uid: number }> {
  const listing = execFileSync('nsenter', ['-t', String(pid), '-m', '--', 'setpriv', `--reuid=${user.uid}`, `--regid=${user.gid}`, '--clear-groups', '--',
    '/bin/sh', '-c', 'for p in /proc/[0-9]*; do echo "${p#/proc/} $(stat -c %u "$p")"; done'], { encoding: 'utf8' });
  return listing.trim().split('\n').map((line) => line.split(' ').map(Number)).map(([seen, uid]) => ({ pid: seen!, uid: uid! }));
}

/** Files a uid owns under these folders, and ACL entries that name it: what access it has left. */
export function accessOf(uid: number, folders: string[]): string[] {
  const owned = execFileSync('find', [...folders, '-uid', String(uid)], { encoding: 'utf8' }).split('\n').filter(Boolean);
  const acl = execFileSync('getfacl', ['-R', '-n', '-p', '--', ...folders], { encoding: 'utf8', maxBuffer: 64 << 20 }).split('\n');
  let file = '';
  const entries: string[] = [];
  for (const line of acl) {
    if (line.startsWith('# file: ')) file = line.slice('# file: '.length);
    else if (line.startsWith(`user:${uid}:`)) entries.push(`${file} ${line}`);
  }
  return [...owned, ...entries];
}

/** Resolves true once the file is at least `bytes` long, false after timeoutMs. */
export async function untilSize(file: string, bytes: number, timeoutMs: number): Promise<boolean> {
  return (await pollUntil(() => (statSync(file).size >= bytes ? true : undefined), timeoutMs, 250)) ?? false;
}
