// File writes for personalisation. Atomic (temporary file + rename) so that a crash or a memory
// save midway never leaves a half-written /etc file, and a rename replaces a symlink at the target
// instead of writing through it (a guest's link must not lead the agent outside its root).
import { promises as fs } from 'node:fs';
import { dirname } from 'node:path';

export async function writeAtomic(path: string, content: string, mode: number): Promise<void> {
  await fs.mkdir(dirname(path), { recursive: true });
  const tmp = `${path}.kiste-tmp`;
  // A leftover from an interrupted write may be read-only (machine-id is 0444).
  await fs.rm(tmp, { force: true });
  const file = await fs.open(tmp, 'w', mode);
  try {
    await file.writeFile(content);
    await file.chmod(mode);
    // On disk before the rename: a crash, or a live fork's copy of the disk, never sees the new name
    // with empty contents (ext4 writes data late; an empty host key file stops sshd from starting).
    await file.sync();
  } finally {
    await file.close();
  }
  await fs.rename(tmp, path);
}

export async function exists(path: string): Promise<boolean> {
  try {
    await fs.stat(path);
    return true;
  } catch {
    return false;
  }
}
