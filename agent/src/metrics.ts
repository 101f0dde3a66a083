// metrics: the spec's InstanceMetricsResponse without the fields the host adds (object, instance,
// sampled_at). CPU percentages need two samples; the gap between them is the request's cost.
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import { join } from 'node:path';
import type { CapacityMetrics, MetricsResult, ProcessMetrics } from '../../src/protocol/agent';
import type { AgentConfig } from './config';
import * as procfs from './procfs';
import { int, object } from './validate';

/** USER_HZ: 100 on every Linux architecture Debian ships. */
const TICKS_PER_SECOND = 100;
/** Page size of x86_64 and Debian's arm64 kernels. */
const PAGE_BYTES = 4096;
const TOP_PROCESSES = 20;
const MIB = 1024 * 1024;

export async function metrics(raw: unknown, config: AgentConfig): Promise<MetricsResult> {
  const sampleMs = int(object(raw), 'sample_ms', { optional: true, min: 10, max: 5000 }) ?? 200;
  const [cpu1, procs1] = await Promise.all([procfs.cpuTimes(config.proc), procfs.processSamples(config.proc)]);
  const t1 = performance.now();
  await new Promise((resolve) => setTimeout(resolve, sampleMs));
  const [cpu2, procs2, load, mem, disk, uptime] = await Promise.all([
    procfs.cpuTimes(config.proc),
    procfs.processSamples(config.proc),
    procfs.loadAverage(config.proc),
    procfs.memInfo(config.proc),
    diskCapacity(config.root),
    procfs.uptimeSeconds(config.proc),
  ]);
  const seconds = (performance.now() - t1) / 1000;

  let percent: number | null = null;
  if (cpu1 && cpu2 && cpu2.total > cpu1.total) {
    const busy = cpu2.total - cpu1.total - (cpu2.idle - cpu1.idle);
    percent = round2(Math.min(100, Math.max(0, (100 * busy) / (cpu2.total - cpu1.total))));
  } else if (cpu1 && cpu2) {
    percent = 0;
  }
  const memory: CapacityMetrics = mem
    ? capacity(mem.totalKib * 1024, (mem.totalKib - mem.availableKib) * 1024, mem.availableKib * 1024)
    : capacity(0, 0, 0);

  return {
    cpu: {
      cores: cpu2?.cores || os.cpus().length,
      load_1: load?.[0] ?? 0,
      load_5: load?.[1] ?? 0,
      load_15: load?.[2] ?? 0,
      percent,
    },
    memory,
    disk: disk ?? capacity(0, 0, 0),
    uptime_seconds: uptime ?? 0,
    processes: await topProcesses(config, procs1, procs2, seconds),
  };
}

async function topProcesses(
  config: AgentConfig,
  before: Map<number, procfs.ProcessSample>,
  after: Map<number, procfs.ProcessSample>,
  seconds: number,
): Promise<ProcessMetrics[]> {
  const ranked = [...after.values()].map((p) => {
    const prev = before.get(p.pid);
    // A process new in the second sample (or a reused pid) has no rate yet.
    const cpu = prev && prev.start === p.start && seconds > 0 ? round2((100 * (p.ticks - prev.ticks)) / TICKS_PER_SECOND / seconds) : null;
    return { sample: p, cpu };
  });
  ranked.sort((a, b) => (b.cpu ?? -1) - (a.cpu ?? -1) || b.sample.rssPages - a.sample.rssPages || a.sample.pid - b.sample.pid);
  const top = ranked.slice(0, TOP_PROCESSES);
  const users = await procfs.userNames(join(config.root, 'etc/passwd'));
  return Promise.all(
    top.map(async ({ sample, cpu }) => {
      const [cmdline, uid] = await Promise.all([procfs.commandLine(config.proc, sample.pid), procfs.processUid(config.proc, sample.pid)]);
      return {
        pid: sample.pid,
        name: sample.name,
        // Kernel threads have no command line; show them the way ps does.
        command: cmdline ? cmdline.slice(0, 1024) : `[${sample.name}]`,
        user: uid === null ? null : (users.get(uid) ?? String(uid)),
        cpu_percent: cpu === null ? null : Math.max(0, cpu),
        memory_mib: Math.floor((sample.rssPages * PAGE_BYTES) / MIB),
      };
    }),
  );
}

async function diskCapacity(path: string): Promise<CapacityMetrics | null> {
  try {
    const s = await fs.statfs(path);
    return capacity(s.blocks * s.bsize, (s.blocks - s.bfree) * s.bsize, s.bavail * s.bsize);
  } catch {
    return null;
  }
}

function capacity(totalBytes: number, usedBytes: number, availableBytes: number): CapacityMetrics {
  const mib = (bytes: number) => Math.max(0, Math.floor(bytes / MIB));
  return { total_mib: mib(totalBytes), used_mib: mib(usedBytes), available_mib: mib(availableBytes) };
}

function round2(value: number): number {
  return Math.round(value * 100) / 100;
}
