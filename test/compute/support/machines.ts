// Helpers for the QEMU driver tests: a machine directory with a disk overlay and the tiny guest,
// waiting for serial console output, and a line client for the tiny guest's agent port.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { detectAccelerator } from '../../../src/compute/qemu/accelerator-probe';
import type { MachineSpec } from '../../../src/compute/qemu/command-line';
import { createDisk, createOverlay } from '../../../src/compute/qemu/disks';
import { machineFiles } from '../../../src/compute/qemu/machine-files';
import { listQemuProcesses } from '../../../src/compute/qemu/qemu-process';
import { pollUntil } from '../../../src/compute/qemu/wait';
import { READY_MARKER, tinyGuest } from './tiny-guest';

/** QEMU present on this host? The driver tests need it (Debian: qemu-system-x86, qemu-utils). */
export function qemuInstalled(): boolean {
  try {
    execFileSync('qemu-system-x86_64', ['--version'], { stdio: 'pipe' });
    execFileSync('qemu-img', ['--version'], { stdio: 'pipe' });
    return true;
  } catch {
    return false;
  }
}

/**
 * The driver tests run real QEMU; they never skip. Without QEMU they fail at once with what to
 * install (.ci/run installs it), instead of counting as passed.
 */
export function describeWithQemu(name: string, fn: () => void): void {
  describe(name, () => {
    beforeAll(() => {
      if (!qemuInstalled()) throw new Error('qemu-system-x86_64 and qemu-img are needed: apt-get install qemu-system-x86 qemu-utils');
    });
    fn();
  });
}

export interface TestRoot {
  root: string;
  baseDisk: string;
  cleanup(): void;
}

/** A machines root for one test file (short path: unix sockets live under it) with a shared base disk. */
export async function makeRoot(): Promise<TestRoot> {
  const root = mkdtempSync(join(tmpdir(), 'kq-'));
  const baseDisk = join(root, 'base.qcow2');
  await createDisk(baseDisk, 64 * 1024 * 1024);
  return {
    root,
    baseDisk,
    cleanup() {
      // Never leave a QEMU of this test behind, whatever failed.
      for (const p of listQemuProcesses()) {
        if (p.pidFile?.startsWith(`${root}/`)) {
          try {
            process.kill(p.pid, 'SIGKILL');
          } catch {
            // gone
          }
        }
      }
      rmSync(root, { recursive: true, force: true });
    },
  };
}

export interface MachineOptions {
  fileBackedMemory?: boolean;
  memoryMib?: number;
  extraAppend?: string;
}

/** A spec for the tiny guest in `<root>/<id>/`, with its disk an overlay on the root's base disk. */
export async function makeMachine(t: TestRoot, id: string, options: MachineOptions = {}): Promise<MachineSpec> {
  const files = machineFiles(join(t.root, id));
  mkdirSync(files.runDir, { recursive: true });
  const disk = join(files.dir, 'disk.qcow2');
  await createOverlay(t.baseDisk, disk);
  const guest = tinyGuest();
  const { accelerator } = await detectAccelerator();
  return {
    id,
    vcpu: 1,
    memoryMib: options.memoryMib ?? 256,
    kernel: guest.kernel,
    initrd: guest.initrd,
    disk,
    appendArgs: `${guest.append}${options.extraAppend ? ` ${options.extraAppend}` : ''}`,
    accelerator,
    qmpSocket: files.qmpSocket,
    agentSocket: files.agentSocket,
    serialLog: files.serialLog,
    pidFile: files.pidFile,
    memoryFile: options.fileBackedMemory ? files.memoryFile : undefined,
  };
}

export function serialText(spec: MachineSpec): string {
  return existsSync(spec.serialLog) ? readFileSync(spec.serialLog, 'utf8').replace(/\r/g, '') : '';
}

/** Waits until the serial log matches; returns how long it took. */
export async function waitForSerial(spec: MachineSpec, pattern: RegExp | string = READY_MARKER, timeoutMs = 60_000): Promise<number> {
  const started = Date.now();
  const hit = await pollUntil(() => {
    const text = serialText(spec);
    return (typeof pattern === 'string' ? text.includes(pattern) : pattern.test(text)) ? true : undefined;
  }, timeoutMs, 25);
  if (!hit) throw new Error(`serial log of ${spec.id} never matched ${String(pattern)}; tail:\n${serialText(spec).slice(-2000)}`);
  return Date.now() - started;
}

/** All `kiste-tick N` values on the serial console, in order. */
export function ticks(spec: MachineSpec): number[] {
  return [...serialText(spec).matchAll(/kiste-tick (\d+)/g)].map((m) => Number(m[1]));
}

/**
 * Sends one line to the tiny guest over the agent port and resolves with the answer lines up to and
 * including the first one matching `until`.
 */
export function agentRequest(spec: MachineSpec, line: string, until: RegExp, timeoutMs = 20_000): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const socket = connect(spec.agentSocket);
    let buffer = '';
    const lines: string[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`agent of ${spec.id}: no ${String(until)} within ${timeoutMs} ms (got ${JSON.stringify(lines)})`));
    }, timeoutMs);
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.write(`${line}\n`));
    socket.on('data', (chunk: string) => {
      buffer += chunk;
      let i: number;
      while ((i = buffer.indexOf('\n')) >= 0) {
        const answer = buffer.slice(0, i).replace(/\r$/, '');
        buffer = buffer.slice(i + 1);
        lines.push(answer);
        if (until.test(answer)) {
          clearTimeout(timer);
          socket.destroy();
          resolve(lines);
          return;
        }
      }
    });
    socket.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}
