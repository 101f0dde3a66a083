// Readers for /proc (under a configurable root, so tests can use fixtures). Each returns null
// instead of throwing when a file is missing or odd: metrics are best effort.
import { promises as fs } from 'node:fs';
import { join } from 'node:path';

async function read(path: string): Promise<string | null> {
  try {
    return await fs.readFile(path, 'utf8');
  } catch {
    return null;
  }
}

export async function bootId(proc: string): Promise<string | null> {
  const text = await read(join(proc, 'sys/kernel/random/boot_id'));
  return text ? text.trim() : null;
}

export async function uptimeSeconds(proc: string): Promise<number | null> {
  const text = await read(join(proc, 'uptime'));
  const value = text ? Number.parseFloat(text.split(/\s+/)[0]) : Number.NaN;
  return Number.isFinite(value) ? Math.floor(value) : null;
}

export interface CpuTimes {
  /** Jiffies, all cores together. */
  total: number;
  idle: number;
  cores: number;
}

export async function cpuTimes(proc: string): Promise<CpuTimes | null> {
  const text = await read(join(proc, 'stat'));
  if (!text) return null;
  let cores = 0;
  let times: number[] | null = null;
  for (const line of text.split('\n')) {
    if (line.startsWith('cpu ')) times = line.trim().split(/\s+/).slice(1).map(Number);
    else if (/^cpu\d+ /.test(line)) cores += 1;
  }
  if (!times || times.length < 4 || times.some((t) => !Number.isFinite(t))) return null;
  // user nice system idle iowait irq softirq steal [guest guest_nice: already inside user/nice]
  const total = times.slice(0, 8).reduce((a, b) => a + b, 0);
  const idle = times[3] + (times[4] ?? 0);
  return { total, idle, cores };
}

export async function loadAverage(proc: string): Promise<[number, number, number] | null> {
  const text = await read(join(proc, 'loadavg'));
  if (!text) return null;
  const [a, b, c] = text.trim().split(/\s+/).map(Number);
  return [a, b, c].every(Number.isFinite) ? [a, b, c] : null;
}

export async function memInfo(proc: string): Promise<{ totalKib: number; availableKib: number } | null> {
  const text = await read(join(proc, 'meminfo'));
  if (!text) return null;
  const fields = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^(\w+):\s+(\d+)/.exec(line);
    if (m) fields.set(m[1], Number(m[2]));
  }
  const total = fields.get('MemTotal');
  if (total === undefined) return null;
  const available =
    fields.get('MemAvailable') ?? (fields.get('MemFree') ?? 0) + (fields.get('Buffers') ?? 0) + (fields.get('Cached') ?? 0);
  return { totalKib: total, availableKib: Math.min(total, available) };
}

export interface ProcessSample {
  pid: number;
  name: string;
  /** Jiffies in user + system mode. */
  ticks: number;
  /** Start time in jiffies after boot: tells a reused pid apart. */
  start: number;
  rssPages: number;
}

export async function processSamples(proc: string): Promise<Map<number, ProcessSample>> {
  const out = new Map<number, ProcessSample>();
  let entries: string[];
  try {
    entries = await fs.readdir(proc);
  } catch {
    return out;
  }
  const pids = entries.filter((e) => /^\d+$/.test(e)).map(Number);
  // Bounded concurrency: a guest may run thousands of processes.
  for (let i = 0; i < pids.length; i += 64) {
    const batch = await Promise.all(pids.slice(i, i + 64).map((pid) => processSample(proc, pid)));
    for (const sample of batch) if (sample) out.set(sample.pid, sample);
  }
  return out;
}

async function processSample(proc: string, pid: number): Promise<ProcessSample | null> {
  const text = await read(join(proc, String(pid), 'stat'));
  if (!text) return null;
  // "pid (comm) state ..." where comm may itself contain spaces and parentheses.
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  if (open < 0 || close < open) return null;
  const rest = text.slice(close + 2).trim().split(/\s+/);
  // rest[0] is field 3 (state): field n is rest[n - 3].
  const utime = Number(rest[11]);
  const stime = Number(rest[12]);
  const start = Number(rest[19]);
  const rss = Number(rest[21]);
  if (![utime, stime, start, rss].every(Number.isFinite)) return null;
  return { pid, name: text.slice(open + 1, close), ticks: utime + stime, start, rssPages: Math.max(0, rss) };
}

export async function commandLine(proc: string, pid: number): Promise<string | null> {
  const text = await read(join(proc, String(pid), 'cmdline'));
  if (text === null) return null;
  return text.replace(/\0+$/, '').replace(/\0/g, ' ');
}

export async function processUid(proc: string, pid: number): Promise<number | null> {
  const text = await read(join(proc, String(pid), 'status'));
  const m = text ? /^Uid:\s+(\d+)/m.exec(text) : null;
  return m ? Number(m[1]) : null;
}

export async function userNames(passwdPath: string): Promise<Map<number, string>> {
  const names = new Map<number, string>();
  const text = await read(passwdPath);
  for (const line of (text ?? '').split('\n')) {
    const [name, , uid] = line.split(':');
    if (name && uid && /^\d+$/.test(uid)) names.set(Number(uid), name);
  }
  return names;
}
