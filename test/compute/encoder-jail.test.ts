// Video encoders run niced, in a CPU- and memory-limited cgroup per account below one for all
// encoders, as kiste's own unprivileged uid: on this host's real cgroups (v1 here, v2 on ordinary
// hosts) with a real ffmpeg encoding frames to RTP on loopback, seen from /proc. The v2 files are
// also checked on a stand-in tree, so both kinds are covered wherever the suite runs.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CgroupMode } from '../../src/compute/jail/cgroups';
import { ENCODER_CPUS, ENCODER_MEMORY_MIB, ENCODER_MEMORY_MIB_PER_ACCOUNT, EncoderJail } from '../../src/compute/jail/encoder-jail';
import { pollUntil } from '../../src/compute/qemu/wait';
import { startVp8Encoder, type VideoEncoder } from '../../src/media/vp8-encoder';
import { testUidBase } from '../support/jail';

jest.setTimeout(60_000);

/** The cpu group folder of `kiste/<path>` (v1: the cpu hierarchy; v2: the one hierarchy). */
function cpuDir(mode: CgroupMode, path: string): string {
  if (mode.kind === 'none') throw new Error(`this host must have writable cgroups for the test suite: ${mode.reason}`);
  return join(mode.kind === 'v2' ? mode.root : mode.cpu, path);
}

function memoryFile(mode: CgroupMode, path: string): string {
  if (mode.kind === 'v2') return join(mode.root, path, 'memory.max');
  if (mode.kind === 'v1') return join(mode.memory, path, 'memory.limit_in_bytes');
  throw new Error('no cgroups');
}

const pidsIn = (dir: string) => readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
const field = (pid: number, name: string) => new RegExp(`^${name}:[ \\t]*(.*)$`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]!;
/** The nice value: field 19 of /proc/PID/stat (after the command name in parentheses). */
const niceOf = (pid: number) => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[16]);

const encoders: VideoEncoder[] = [];
const encoderErrors: string[] = [];
afterAll(() => encoders.forEach((encoder) => encoder.close()));

async function encoderFor(jail: EncoderJail, accountId: string): Promise<{ encoder: VideoEncoder; packets: () => number }> {
  let packets = 0;
  const encoder = await startVp8Encoder({
    width: 64, height: 48, kbps: 200,
    place: () => jail.placement(accountId),
    onRtp: () => packets++,
    onError: (message) => encoderErrors.push(message),
  });
  encoders.push(encoder);
  return { encoder, packets: () => packets };
}

test('an encoder runs niced, as the uid base without capabilities, in its account\'s group below the encoders\' limits; the group goes with its last encoder', async () => {
  const uidBase = testUidBase();
  const jail = new EncoderJail({ uidBase });
  const mode = jail.mode();
  const account = `acct-${uidBase}`;
  const group = cpuDir(mode, `encoders/${account}`);

  const first = await encoderFor(jail, account);
  const second = await encoderFor(jail, account);
  // It encodes: frames in, RTP out on loopback (the unprivileged user needs nothing more).
  const frame = Buffer.alloc(64 * 48 * 4, 0x80);
  const sent = await pollUntil(() => {
    first.encoder.write(frame);
    return first.packets() > 0 || undefined;
  }, 20_000, 200);
  expect(sent).toBe(true);

  const pids = (await pollUntil(() => (pidsIn(group).length === 2 ? pidsIn(group) : undefined), 5_000))!;
  expect(pids).toHaveLength(2);
  for (const pid of pids) {
    expect(readFileSync(`/proc/${pid}/comm`, 'utf8').trim()).toBe('ffmpeg');
    expect(field(pid, 'Uid').split(/\s+/)).toEqual(Array(4).fill(String(uidBase)));
    expect(field(pid, 'Gid').split(/\s+/)).toEqual(Array(4).fill('65534'));
    expect(field(pid, 'Groups')).toBe('');
    expect(field(pid, 'CapEff')).toBe('0000000000000000');
    expect(field(pid, 'CapBnd')).toBe('0000000000000000');
    expect(field(pid, 'NoNewPrivs')).toBe('1');
    expect(niceOf(pid)).toBe(10);
  }
  // The limits: all encoders together, and the account's own.
  const parent = cpuDir(mode, 'encoders');
  if (mode.kind === 'v1') {
    expect(readFileSync(join(parent, 'cpu.cfs_quota_us'), 'utf8').trim()).toBe(String(ENCODER_CPUS * 100_000));
  } else {
    expect(readFileSync(join(parent, 'cpu.max'), 'utf8').trim()).toBe(`${ENCODER_CPUS * 100_000} 100000`);
  }
  expect(Number(readFileSync(memoryFile(mode, 'encoders'), 'utf8'))).toBe(ENCODER_MEMORY_MIB * 1048576);
  expect(Number(readFileSync(memoryFile(mode, `encoders/${account}`), 'utf8'))).toBe(ENCODER_MEMORY_MIB_PER_ACCOUNT * 1048576);

  // Another account's encoder runs in a group of its own.
  const other = await encoderFor(jail, `${account}-other`);
  expect(await pollUntil(() => pidsIn(cpuDir(mode, `encoders/${account}-other`)).length === 1 || undefined, 5_000)).toBe(true);

  first.encoder.close();
  expect(await pollUntil(() => pidsIn(group).length === 1 || undefined, 5_000)).toBe(true);
  expect(existsSync(group)).toBe(true); // the account still has an encoder
  second.encoder.close();
  other.encoder.close();
  expect(await pollUntil(() => !existsSync(group) || undefined, 10_000)).toBe(true);
  expect(await pollUntil(() => !existsSync(cpuDir(mode, `encoders/${account}-other`)) || undefined, 10_000)).toBe(true);
  expect(encoderErrors).toEqual([]);
});

test('cgroup v2: the encoders\' group hands its controllers down; an account\'s group has its memory and task limits; the launch joins it first', () => {
  const base = mkdtempSync(join(tmpdir(), 'kiste-cgroup-v2-'));
  try {
    writeFileSync(join(base, 'cgroup.controllers'), 'cpuset cpu io memory pids\n');
    const jail = new EncoderJail({ uidBase: 1_879_113_728, cgroupBase: base, dropPrivileges: true });
    const placement = jail.placement('acct-1');
    const read = (path: string) => readFileSync(join(base, 'kiste', path), 'utf8');
    expect(read('encoders/cpu.max')).toBe(`${ENCODER_CPUS * 100_000} 100000`);
    expect(read('encoders/memory.max')).toBe(String(ENCODER_MEMORY_MIB * 1048576));
    expect(read('encoders/cgroup.subtree_control')).toBe('+cpu +memory +pids');
    expect(read('encoders/acct-1/cpu.max')).toBe('max 100000');
    expect(read('encoders/acct-1/memory.max')).toBe(String(ENCODER_MEMORY_MIB_PER_ACCOUNT * 1048576));
    expect(read('encoders/acct-1/pids.max')).toBe('256');
    const launch = placement.wrap('nice', ['-n', '10', 'ffmpeg', '-i', 'pipe:0']);
    expect(launch.command).toBe('/bin/sh');
    expect(launch.args[1]).toBe(`echo $$ > '${join(base, 'kiste/encoders/acct-1/cgroup.procs')}' || exit 125; exec "$@"`);
    expect(launch.args.slice(3)).toEqual([
      'setpriv', '--reuid=1879113728', '--regid=65534', '--clear-groups', '--inh-caps=-all', '--bounding-set=-all', '--no-new-privs', '--',
      'nice', '-n', '10', 'ffmpeg', '-i', 'pipe:0',
    ]);
    expect(() => jail.placement('../machines')).toThrow(/not an account id/);
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
});
