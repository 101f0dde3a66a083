// What only kiste-worker reads from its environment (the rest is the service's Config): where it
// listens, the join token it got from the control plane, and what it offers for machines.
import { availableParallelism, totalmem } from 'node:os';
import { statfsSync } from 'node:fs';
import { join } from 'node:path';
import { cidrList, ConfigError, parseListen, type Config } from '../config';
import type { Cidr } from '../net/special-addresses';
import { JoinTokenError, workerSecretOf } from '../protocol/worker-join';

/** Memory the host keeps for itself and the worker when the operator names no offer. */
const HOST_MEMORY_RESERVE_MIB = 1024;
/** vCPUs offered per host CPU when the operator names no offer (guests rarely use all of theirs at once). */
const VCPUS_PER_CPU = 4;

export interface WorkerOffer {
  vcpu: number;
  memoryMib: number;
  diskMib: number;
}

export interface WorkerSettings {
  socketPath: string;
  secretFile: string;
  /**
   * KISTE_WORKER_LISTEN (several hosts): TLS on host:port, with KISTE_WORKER_TLS_CERT/KEY or a
   * certificate made once in <data>/worker-tls; KISTE_WORKER_ALLOW_FROM: the addresses connections
   * are taken from (empty: any).
   */
  tcp: { host: string; port: number; certFile: string | null; keyFile: string | null; generatedDir: string; allowFrom: Cidr[] } | null;
  /** The secret KISTE_WORKER_JOIN_TOKEN gives (null: one box, a random secret the supervising service reads). */
  joinedSecret: Buffer | null;
  offer: WorkerOffer;
}

export function workerSettingsOf(config: Config, env: NodeJS.ProcessEnv = process.env): WorkerSettings {
  const certFile = env.KISTE_WORKER_TLS_CERT || null;
  const keyFile = env.KISTE_WORKER_TLS_KEY || null;
  if (Boolean(certFile) !== Boolean(keyFile)) throw new ConfigError('KISTE_WORKER_TLS_CERT and KISTE_WORKER_TLS_KEY must be set together');
  const listen = env.KISTE_WORKER_LISTEN ? parseListen(env.KISTE_WORKER_LISTEN, 'KISTE_WORKER_LISTEN') : null;
  if (!listen && certFile) throw new ConfigError('KISTE_WORKER_TLS_CERT is set but KISTE_WORKER_LISTEN is not');
  const allowFrom = cidrList('KISTE_WORKER_ALLOW_FROM', env.KISTE_WORKER_ALLOW_FROM);
  if (!listen && allowFrom.length) throw new ConfigError('KISTE_WORKER_ALLOW_FROM is set but KISTE_WORKER_LISTEN is not');
  let joinedSecret: Buffer | null = null;
  if (env.KISTE_WORKER_JOIN_TOKEN) {
    try {
      joinedSecret = workerSecretOf(env.KISTE_WORKER_JOIN_TOKEN.trim());
    } catch (error) {
      if (error instanceof JoinTokenError) throw new ConfigError(`KISTE_WORKER_JOIN_TOKEN: ${error.message}`);
      throw error;
    }
  }
  return {
    socketPath: env.KISTE_WORKER_SOCKET || join(config.dataDir, 'worker.sock'),
    secretFile: env.KISTE_WORKER_SECRET_FILE || join(config.dataDir, 'worker.secret'),
    tcp: listen ? { ...listen, certFile, keyFile, generatedDir: join(config.dataDir, 'worker-tls'), allowFrom } : null,
    joinedSecret,
    offer: {
      vcpu: count('KISTE_WORKER_VCPUS', env.KISTE_WORKER_VCPUS, () => availableParallelism() * VCPUS_PER_CPU),
      memoryMib: count('KISTE_WORKER_MEMORY_MIB', env.KISTE_WORKER_MEMORY_MIB, () => Math.max(0, Math.floor(totalmem() / 2 ** 20) - HOST_MEMORY_RESERVE_MIB)),
      diskMib: count('KISTE_WORKER_DISK_MIB', env.KISTE_WORKER_DISK_MIB, () => freeDiskMib(config.dataDir)),
    },
  };
}

/** What a database integer column holds (the control plane keeps the offer). */
const MAX_COUNT = 2 ** 31 - 1;

function count(name: string, value: string | undefined, fallback: () => number): number {
  if (value === undefined || value === '') return Math.min(MAX_COUNT, fallback());
  if (!/^\d{1,10}$/.test(value) || Number(value) > MAX_COUNT) throw new ConfigError(`${name} must be a whole number up to ${MAX_COUNT}, got "${value}"`);
  return Number(value);
}

/** Free space of the data folder's file system, less a twentieth kept free. */
function freeDiskMib(dir: string): number {
  try {
    const stat = statfsSync(dir);
    return Math.floor((stat.bavail * stat.bsize * 0.95) / 2 ** 20);
  } catch {
    return 0;
  }
}
