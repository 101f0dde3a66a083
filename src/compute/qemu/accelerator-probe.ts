// Decides once whether machines run under KVM or TCG.
//
// "/dev/kvm exists" is not enough: on nested-virtualisation hosts like ours a KVM guest can be
// created but crawls (~90 s to early kernel messages), and `-cpu host` aborts with
// "failed to set MSR 0x10a". So we boot a guest, in exactly the configuration machines use
// (`-accel kvm -cpu host`, q35), and require it to finish within a short budget.
//
// The probe guest needs no image and no kernel: we write a 43-byte multiboot (v1) binary that QEMU's
// `-kernel` loads directly (the "a.out kludge" header gives its load address, so no ELF is needed).
// SeaBIOS runs, the multiboot option ROM jumps to our code in 32-bit protected mode, and the code
// writes one byte to the isa-debug-exit device, which makes QEMU exit with status (byte << 1) | 1.
// So one process run covers: KVM can create the VM, set the host CPU model up (the MSR abort
// happens here), run firmware and guest code, and do port I/O exits. On a healthy KVM host this
// takes ~0.1–0.3 s; TCG does it in 0.08–0.35 s; the crawling nested KVM here needs 1.5 s or more.
// A fixed budget alone misjudged one of our hosts (KVM 1.5 s < 2 s budget, while TCG took 80 ms),
// so the same guest also runs under TCG, in the same probe, and KVM must not be much slower than
// that baseline: 'kvm' only if its run exits with our code within `budgetMs` (default 2 s) and
// within 2x the TCG run + 150 ms.
import { spawn } from 'node:child_process';
import { accessSync, constants, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Accelerator } from './command-line';
import { qemuBinary } from './qemu-process';

const EXIT_BYTE = 0x4b;
/** isa-debug-exit turns the byte written into the exit status (byte << 1) | 1. */
const EXPECTED_STATUS = (EXIT_BYTE << 1) | 1;

/** The probe guest: a multiboot header (a.out kludge) followed by `out 0xf4, al; hlt`. */
export function probeGuestImage(): Buffer {
  const loadAddress = 0x100000;
  const magic = 0x1badb002;
  const flags = 0x00010000; // bit 16: load addresses are in the header (no ELF)
  const header = Buffer.alloc(32);
  header.writeUInt32LE(magic, 0);
  header.writeUInt32LE(flags, 4);
  header.writeUInt32LE((0x100000000 - ((magic + flags) % 0x100000000)) % 0x100000000, 8); // checksum
  header.writeUInt32LE(loadAddress, 12); // header_addr
  header.writeUInt32LE(loadAddress, 16); // load_addr
  header.writeUInt32LE(0, 20); // load_end_addr: 0 = whole file
  header.writeUInt32LE(0, 24); // bss_end_addr: no bss
  header.writeUInt32LE(loadAddress + 32, 28); // entry: right after the header
  const code = Buffer.from([
    0x66, 0xba, 0xf4, 0x00, // mov dx, 0xf4      (isa-debug-exit port)
    0xb0, EXIT_BYTE, //         mov al, EXIT_BYTE
    0xee, //                    out dx, al        (QEMU exits here)
    0xfa, 0xf4, 0xeb, 0xfd, //  cli; hlt; jmp back to hlt
  ]);
  return Buffer.concat([header, code]);
}

export interface ProbeRun {
  ok: boolean;
  durationMs: number;
  detail: string;
}

/** Boots the probe guest once under `accelerator` (as machines use it) and reports how it went. */
export async function runProbeGuest(accelerator: Accelerator, budgetMs: number, binary = qemuBinary()): Promise<ProbeRun> {
  const dir = mkdtempSync(join(tmpdir(), 'kiste-probe-'));
  const image = join(dir, 'probe.bin');
  writeFileSync(image, probeGuestImage());
  const accel = accelerator === 'kvm' ? ['-accel', 'kvm', '-cpu', 'host'] : ['-accel', 'tcg'];
  const args = [...accel, '-machine', 'q35', '-nodefaults', '-no-user-config', '-display', 'none', '-m', '32', '-no-reboot', '-kernel', image, '-device', 'isa-debug-exit,iobase=0xf4,iosize=0x04'];
  const started = Date.now();
  try {
    return await new Promise<ProbeRun>((resolve) => {
      let stderr = '';
      const child = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
      child.stderr.setEncoding('utf8');
      child.stderr.on('data', (chunk: string) => (stderr = (stderr + chunk).slice(-2000)));
      const timer = setTimeout(() => child.kill('SIGKILL'), budgetMs);
      child.on('error', (error) => {
        clearTimeout(timer);
        resolve({ ok: false, durationMs: Date.now() - started, detail: `cannot run ${binary}: ${error.message}` });
      });
      child.on('exit', (code, signal) => {
        clearTimeout(timer);
        const durationMs = Date.now() - started;
        if (code === EXPECTED_STATUS) resolve({ ok: true, durationMs, detail: `probe guest ran in ${durationMs} ms` });
        else if (signal === 'SIGKILL') resolve({ ok: false, durationMs, detail: `probe guest did not finish within ${budgetMs} ms` });
        else resolve({ ok: false, durationMs, detail: `QEMU ended with ${signal ?? `exit code ${code}`}: ${stderr.trim().split('\n').slice(-3).join(' | ')}` });
      });
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export interface AcceleratorChoice {
  accelerator: Accelerator;
  /** Why: the probe's outcome, for /v1/status and the logs. */
  reason: string;
  probeMs: number;
}

export interface ProbeOptions {
  /** How long the KVM probe guest may take (default 2000 ms). */
  budgetMs?: number;
  kvmDevice?: string;
  qemuBinary?: string;
}

/** Probes KVM (no caching: see detectAccelerator) and picks 'kvm' only if it truly works fast. */
export async function probeAccelerator(options: ProbeOptions = {}): Promise<AcceleratorChoice> {
  const started = Date.now();
  const device = options.kvmDevice ?? '/dev/kvm';
  try {
    accessSync(device, constants.R_OK | constants.W_OK);
  } catch {
    return { accelerator: 'tcg', reason: `${device} is missing or not accessible`, probeMs: Date.now() - started };
  }
  const budgetMs = options.budgetMs ?? 2000;
  const tcg = await runProbeGuest('tcg', budgetMs, options.qemuBinary);
  const kvm = await runProbeGuest('kvm', budgetMs, options.qemuBinary);
  const verdict = judgeKvm(kvm, tcg);
  return verdict.usable
    ? { accelerator: 'kvm', reason: `KVM works: ${verdict.why}`, probeMs: Date.now() - started }
    : { accelerator: 'tcg', reason: `KVM unusable, using TCG: ${verdict.why}`, probeMs: Date.now() - started };
}

/** KVM must run the probe guest, and not much slower than TCG ran it in the same probe. */
export function judgeKvm(kvm: ProbeRun, tcg: ProbeRun): { usable: boolean; why: string } {
  if (!kvm.ok) return { usable: false, why: kvm.detail };
  if (!tcg.ok) return { usable: true, why: `${kvm.detail} (no TCG baseline: ${tcg.detail})` };
  const limitMs = 2 * tcg.durationMs + 150;
  const figures = `probe guest ran in ${kvm.durationMs} ms under KVM, ${tcg.durationMs} ms under TCG`;
  return kvm.durationMs <= limitMs ? { usable: true, why: figures } : { usable: false, why: `${figures} (KVM crawls: nested virtualisation?)` };
}

let cached: Promise<AcceleratorChoice> | undefined;

/** The probe, run once per process; later callers share the first answer. */
export function detectAccelerator(options: ProbeOptions = {}): Promise<AcceleratorChoice> {
  cached ??= probeAccelerator(options);
  return cached;
}
