// Who of the jail may open which file, with POSIX ACLs (setfacl: Node has no ACL call). A jail user
// gets exactly what its QEMU needs: passage through the folders on the way (never a listing), its
// own disk layers read-write, layers it shares with the machine it was forked from read-only.
import { lstatSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { runTool } from './run-tool';

export type Grantee = { uid: number } | { gid: number };

function entry(who: Grantee): string {
  return 'uid' in who ? `u:${who.uid}` : `g:${who.gid}`;
}

/** Adds (or changes) ACL entries: `perms` is `x`, `r` or `rw`. */
export function grant(paths: string[], who: Grantee, perms: 'x' | 'r' | 'rw'): Promise<void> {
  return paths.length ? setfacl(['-m', `${entry(who)}:${perms}`, '--', ...paths]) : Promise.resolve();
}

/** Replaces a file's whole ACL (and so its mode): `spec` as setfacl --set takes it. */
export function setAcl(path: string, spec: string): Promise<void> {
  return setfacl(['--set', spec, '--', path]);
}

/** Removes a user's or group's ACL entries (none there is fine). */
export function revoke(paths: string[], who: Grantee): Promise<void> {
  return paths.length ? setfacl(['-x', entry(who), '--', ...paths]) : Promise.resolve();
}

/**
 * Lets `who` pass through every folder from `path` up to `/` that others may not pass through
 * (e.g. /root, or a 0700 data folder): an ACL entry with `x` only, so nothing can be listed.
 */
export async function grantPassage(path: string, who: Grantee): Promise<string[]> {
  const closed: string[] = [];
  for (let dir = path; ; dir = dirname(dir)) {
    if ((statSync(dir).mode & 0o001) === 0) closed.push(dir);
    if (dir === dirname(dir)) break;
  }
  await grant(closed, who, 'x');
  return closed;
}

/** Whether this user owns the file or has read access by an ACL entry (a regular file, not a link). */
export async function readableBy(file: string, uid: number): Promise<boolean> {
  const stat = lstatSync(file, { throwIfNoEntry: false });
  if (!stat?.isFile()) return false;
  if (stat.uid === uid) return true;
  const acl = await runTool('getfacl', ['-n', '--omit-header', '--', file]);
  return acl.split('\n').some((line) => new RegExp(`^user:${uid}:r`).test(line));
}

function setfacl(args: string[]): Promise<void> {
  return runTool('setfacl', args).then(() => undefined);
}
