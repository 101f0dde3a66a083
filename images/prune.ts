// Old image versions pile up (each new agent bundle or recipe makes one, ~0.4 GB for minimal).
// A version may be removed only when nothing needs it: it is no profile's latest, no machine disk
// backs onto it (overlays read the image's disk.qcow2 forever), and it is older than a grace period
// (several services or test runs may share one image folder and hold a version this process cannot
// see). Runs under the folder's build lock, so it never races a build that is publishing.
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { readLatest, readManifest, VERSION_RE } from './build-image';
import { acquireLock } from './lock';

export interface PruneOptions {
  /** Version folder names some machine's disk chain uses. */
  inUse: ReadonlySet<string>;
  /** Versions created less than this long ago stay (default one hour). */
  graceMs?: number;
  now?: Date;
}

/** Removes the image versions nothing needs; returns their names. */
export async function pruneImageVersions(outDir: string, options: PruneOptions): Promise<string[]> {
  const lock = await acquireLock(join(outDir, '.lock'), `pruning old image versions in ${outDir}`);
  try {
    const latest = new Set(Object.values(await readLatest(outDir)).map((entry) => entry.version));
    const cutoff = (options.now ?? new Date()).getTime() - (options.graceMs ?? 3600_000);
    const removed: string[] = [];
    for (const name of await fs.readdir(outDir)) {
      if (!VERSION_RE.test(name) || latest.has(name) || options.inUse.has(name)) continue;
      const manifest = await readManifest(join(outDir, name));
      const createdAt = manifest ? Date.parse(manifest.created_at) : (await fs.stat(join(outDir, name))).mtimeMs;
      if (!(createdAt < cutoff)) continue;
      await fs.rm(join(outDir, name), { recursive: true, force: true });
      removed.push(name);
    }
    return removed;
  } finally {
    await lock.release();
  }
}
