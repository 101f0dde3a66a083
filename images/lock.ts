// One build at a time per output directory, across processes (the service building at start, a CLI
// build, both jest projects): a lock directory made with mkdir (atomic) holding the owner's pid.
// A lock whose owner is gone is taken over.
import { promises as fs } from 'node:fs';
import { join } from 'node:path';

export interface LockOwner {
  pid: number;
  since: string;
  what: string;
}

export interface HeldLock {
  release(): Promise<void>;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function readOwner(dir: string): Promise<LockOwner | undefined> {
  try {
    return JSON.parse(await fs.readFile(join(dir, 'owner.json'), 'utf8')) as LockOwner;
  } catch {
    return undefined;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Takes the lock at `dir`, waiting while a live process holds it. `onWait` is called (at most once a
 * second) while waiting.
 */
/** Locks this process holds: one of its own pid it does not hold was left by an earlier process with the same pid (a container restarted). */
const heldHere = new Set<string>();

export async function acquireLock(
  dir: string,
  what: string,
  opts: { signal?: AbortSignal; onWait?: (owner: LockOwner | undefined) => void } = {},
): Promise<HeldLock> {
  let lastWaitReport = 0;
  for (;;) {
    if (opts.signal?.aborted) throw Object.assign(new Error('image build aborted'), { name: 'AbortError' });
    try {
      await fs.mkdir(dir);
      const owner: LockOwner = { pid: process.pid, since: new Date().toISOString(), what };
      heldHere.add(dir);
      await fs.writeFile(join(dir, 'owner.json'), JSON.stringify(owner));
      let released = false;
      return {
        async release() {
          if (released) return;
          released = true;
          heldHere.delete(dir);
          await fs.rm(dir, { recursive: true, force: true });
        },
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const owner = await readOwner(dir);
    if (owner && (!alive(owner.pid) || (owner.pid === process.pid && !heldHere.has(dir)))) {
      // the owner died (killed build): take over by removing its lock, then race for mkdir again
      await fs.rm(dir, { recursive: true, force: true });
      continue;
    }
    if (!owner) {
      // between mkdir and writing owner.json, or a lock left without owner by a crash right there
      const stat = await fs.stat(dir).catch(() => undefined);
      if (stat && Date.now() - stat.mtimeMs > 10_000) {
        await fs.rm(dir, { recursive: true, force: true });
        continue;
      }
    }
    if (Date.now() - lastWaitReport >= 1000) {
      lastWaitReport = Date.now();
      opts.onWait?.(owner);
    }
    await sleep(250);
  }
}
