// Where one machine's runtime files live: everything in one directory per machine, so that
// "the machine's directory is gone" is a clear signal that its QEMU (if any) is an orphan, and
// deleting a machine is one recursive remove. What QEMU itself makes (sockets, pid file, serial
// log, RAM file) lies in `run/`, the only folder its jail user may write to while it starts (see
// src/compute/jail); the rest is the service's. Short names: unix socket paths are limited to 107
// bytes, so the directory path itself should stay well under ~85 bytes.
import { join } from 'node:path';

export interface MachineFiles {
  dir: string;
  /** What QEMU makes. */
  runDir: string;
  qmpSocket: string;
  agentSocket: string;
  /** QEMU's VNC server of the machine's screen (machines whose image has a display). */
  displaySocket: string;
  /** Guest serial console (ttyS0), appended across boots and restores. */
  serialLog: string;
  pidFile: string;
  /** QEMU's own stdout/stderr (its warnings and fatal errors). */
  qemuLog: string;
  /** Guest RAM when the machine runs with file-backed memory. */
  memoryFile: string;
  /** Device (and, without file-backed RAM, memory) state of a saved session. */
  stateFile: string;
}

/** What QEMU may make in `run/`, by kind: anything else found there is not its to have made. */
export const RUN_ENTRIES = {
  sockets: ['qmp.sock', 'agent.sock', 'migrate.sock', 'display.sock'],
  files: ['serial.log', 'qemu.pid', 'memory.ram'],
} as const;

export function machineFiles(dir: string): MachineFiles {
  const runDir = join(dir, 'run');
  return {
    dir,
    runDir,
    qmpSocket: join(runDir, 'qmp.sock'),
    agentSocket: join(runDir, 'agent.sock'),
    displaySocket: join(runDir, 'display.sock'),
    serialLog: join(runDir, 'serial.log'),
    pidFile: join(runDir, 'qemu.pid'),
    qemuLog: join(dir, 'qemu.log'),
    memoryFile: join(runDir, 'memory.ram'),
    stateFile: join(dir, 'memory.state'),
  };
}
