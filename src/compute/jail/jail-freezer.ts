// Freezes every process of the jail's uid range (SIGSTOP) and thaws them again (SIGCONT): how the
// egress watch (egress-watch.ts) keeps machines cut off while their network rules are not in place.
//
// The processes are found the way the rules find their packets: by user. The rules match the owner
// of a socket, which is the file-system uid of the process that made it, so a process counts when
// any of its uids (real, effective, saved, file system) lies in the range: every machine's QEMU,
// whether or not the machine host knows it yet (one starting, one a taken-over QEMU runs).
// A stopped process is held by the kernel: no vCPU, no slirp, no timer of it runs, and nothing it
// does (a QEMU that ignores its monitor) can resume it. Nothing else in kiste stops or continues
// jail processes, so "every stopped process of the range" is what the watch froze, also when an
// earlier run of the service froze it and died.
import { readdirSync, readFileSync } from 'node:fs';

export interface UidRange {
  first: number;
  last: number;
}

interface JailProcess {
  pid: number;
  stopped: boolean;
}

export class JailFreezer {
  constructor(private readonly uids: UidRange) {}

  /** SIGSTOP to every running process of a jail user; answers how many were stopped now. */
  freeze(): number {
    return this.signal('SIGSTOP', (candidate) => !candidate.stopped);
  }

  /** SIGCONT to every stopped process of a jail user; answers how many. */
  thaw(): number {
    return this.signal('SIGCONT', (candidate) => candidate.stopped);
  }

  /** The pids of the range's processes that are stopped now. */
  frozen(): number[] {
    return this.processes().filter((candidate) => candidate.stopped).map((candidate) => candidate.pid);
  }

  private signal(signal: NodeJS.Signals, applies: (candidate: JailProcess) => boolean): number {
    let sent = 0;
    for (const found of this.processes().filter(applies)) {
      try {
        process.kill(found.pid, signal);
        sent++;
      } catch {
        // exited since it was listed
      }
    }
    return sent;
  }

  private processes(): JailProcess[] {
    const found: JailProcess[] = [];
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      const status = readStatus(Number(entry));
      if (status && status.uids.some((uid) => uid >= this.uids.first && uid <= this.uids.last)) found.push({ pid: Number(entry), stopped: status.stopped });
    }
    return found;
  }
}

/** The uids and the stop state of a process (`T`: stopped by a signal; `t`, a tracer's stop, is not ours). */
function readStatus(pid: number): { uids: number[]; stopped: boolean } | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/status`, 'latin1');
  } catch {
    return undefined; // gone, or a kernel thread's we may not read
  }
  const uids = /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/m.exec(text);
  const state = /^State:\s+(\S)/m.exec(text);
  if (!uids || !state) return undefined;
  return { uids: uids.slice(1).map(Number), stopped: state[1] === 'T' };
}
