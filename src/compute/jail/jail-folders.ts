// The folders the jail needs before any machine starts: the machines' and layers' folders (root's,
// 0700: the jail group passes through by an ACL entry, nobody else lists them) and passage for the
// jail group through every folder on the way to those and to the images. A folder that is missing is
// made (a fresh data folder has no images folder until the first image build has run; images are
// public, so it is made 0755). When one cannot be prepared, the answer says what is wrong with which
// folder: no permission, a read-only file system, a file in the way, no space, or no POSIX ACLs.
import { chmodSync, mkdirSync } from 'node:fs';
import { grantPassage } from './file-access';

export interface FolderProblem {
  reason: string;
  hint: string;
}

export interface JailFolders {
  /** Made 0700 (the machines' and layers' folders). */
  own: string[];
  /** The jail group passes through these and every folder above them; made 0755 when missing. */
  passThrough: string[];
}

const CHOOSE = 'or choose other folders with KISTE_DATA_DIR and KISTE_IMAGE_DIR';

/** Null once every folder is there and passable; else the first folder's problem. `onOpened` hears the folders given passage. */
export async function openJailFolders(folders: JailFolders, gid: number, onOpened: (opened: string[]) => void): Promise<FolderProblem | null> {
  for (const dir of folders.own) {
    try {
      mkdirSync(dir, { recursive: true });
      chmodSync(dir, 0o700);
    } catch (error) {
      return folderProblem(dir, error);
    }
  }
  for (const dir of folders.passThrough) {
    try {
      mkdirSync(dir, { recursive: true, mode: 0o755 });
    } catch (error) {
      return folderProblem(dir, error);
    }
    try {
      const opened = await grantPassage(dir, { gid });
      if (opened.length) onOpened(opened);
    } catch (error) {
      return passageProblem(dir, error);
    }
  }
  return null;
}

/** Why a folder could not be made or changed, from the system's error code. */
export function folderProblem(dir: string, error: unknown): FolderProblem {
  const code = (error as NodeJS.ErrnoException).code;
  switch (code) {
    case 'EACCES':
    case 'EPERM':
      return { reason: `kiste may not create or change ${dir} (${code})`, hint: `Run kiste as root on a local file system (not a root-squashed network mount), ${CHOOSE}.` };
    case 'EROFS':
      return { reason: `${dir} is on a read-only file system`, hint: `Mount it read-write, ${CHOOSE}.` };
    case 'ENOTDIR':
    case 'EEXIST':
      return { reason: `${dir} or a folder on its way is a file, not a folder`, hint: `Move that file away, ${CHOOSE}.` };
    case 'ENOSPC':
    case 'EDQUOT':
      return { reason: `no space left to create ${dir}`, hint: 'Free space on that file system.' };
    default:
      return { reason: `${dir} cannot be prepared: ${(error as Error).message}`, hint: `Check that folder and its file system, ${CHOOSE}.` };
  }
}

/** setfacl's failure, or a folder that went away between mkdir and its ACL. */
function passageProblem(dir: string, error: unknown): FolderProblem {
  if ((error as NodeJS.ErrnoException).code) return folderProblem(dir, error);
  const message = (error as Error).message;
  if (/not supported/i.test(message)) {
    return {
      reason: `the file system of ${dir} has no POSIX ACLs, so machine users cannot be let through it alone`,
      hint: 'Keep KISTE_DATA_DIR and KISTE_IMAGE_DIR on a file system with POSIX ACLs (ext4, xfs, btrfs, tmpfs).',
    };
  }
  return { reason: `machine users cannot be given passage through ${dir}: ${message}`, hint: 'kiste sets ACL entries with setfacl (package acl) as root; the message says why it failed.' };
}
