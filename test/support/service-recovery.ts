// What the crash-safety suites share (recovery, recovery-midway): a service process's configuration
// on a fresh database, the admin's API key, waiting, one exec over HTTP, and the clean-up that
// leaves no QEMU, database or data folder behind.
import request from 'supertest';
import { listQemuProcesses } from '../../src/compute/qemu';
import { pollUntil, sleep } from '../../src/compute/qemu/wait';
import { checkContract } from './contract';
import type { FreshDatabase } from './database';
import { TEST_IMAGE_DIR } from './images';
import type { ServiceProcess } from './service-process';


export const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste';
export const ADMIN = { email: 'admin@example.com', password: 'a long admin password 42' };

/**
 * The service's configuration for a run on `fresh`, listening on `port`: machines in a local worker,
 * the default (a kill -9 of the service's process group ends the worker with it).
 */
export function serviceEnv(fresh: FreshDatabase, port: number, extra: Record<string, string> = {}): Record<string, string> {
  return {
    KISTE_LISTEN: `127.0.0.1:${port}`, KISTE_DATA_DIR: fresh.dataDir, KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_ACCELERATOR: 'tcg', KISTE_COMPUTE: 'worker',
    KISTE_ADMIN_EMAIL: ADMIN.email, KISTE_ADMIN_PASSWORD: ADMIN.password, ...(fresh.url ? { KISTE_DATABASE_URL: fresh.url } : {}), ...extra,
  };
}

/** Signs the admin in and makes an API key: the header that carries it. */
export async function adminKey(url: string, label: string): Promise<Record<string, string>> {
  const login = await request(url).post('/v1/auth/login').send(ADMIN).expect(checkContract).expect(200);
  const cookie = (login.headers['set-cookie'] as unknown as string[]).find((line) => line.startsWith('kiste_session='))!.split(';')[0]!;
  const key = (await request(url).post('/v1/api-tokens').set('cookie', cookie).set('x-csrf-token', login.body.csrf)
    .send({ label, expires_in_seconds: 3600 }).expect(200)).body.token as string;
  return { authorization: `Bearer ${key}` };
}

/** Stops the services a describe started, kills QEMUs they left, and drops the database and data folder. */
export async function cleanUp(fresh: FreshDatabase | undefined, started: ServiceProcess[]): Promise<void> {
  for (const service of started) await service.ensureStopped();
  if (!fresh) return;
  for (const qemu of listQemuProcesses().filter((p) => p.machineDir?.startsWith(fresh.dataDir))) process.kill(qemu.pid, 'SIGKILL');
  await fresh.cleanup();
}

/**
 * Boot snapshot templates the service makes in the background (of an image version new to it) are its
 * own machines, not orphans: the "nothing left" checks leave them out.
 */
export const notTemplate = (name: string | undefined) => !name?.startsWith('snapshot-');

/** The image may still be being published by the service's start-up build: K06 is retryable. */
export async function retryWhileImageNotReady(send: () => request.Test): Promise<request.Response> {
  for (let attempt = 0; ; attempt++) {
    const res = await send();
    if (res.status !== 503 || res.body.error?.code !== 'K06' || attempt > 30) return res;
    await sleep(2000);
  }
}

/** Polls `probe` until it gives something truthy (that), or fails naming `what` once `timeoutMs` have passed. */
export async function waitUntil<T>(what: string, probe: () => Promise<T | undefined | null | false> | T | undefined | null | false, timeoutMs: number, everyMs = 200): Promise<T> {
  const value = await pollUntil(async () => (await probe()) || undefined, timeoutMs, everyMs);
  if (!value) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
  return value;
}

/** One exec's stdout, or null when it did not exit 0. */
export async function execOf(api: () => ReturnType<typeof request>, auth: Record<string, string>, name: string, argv: string[]): Promise<string | null> {
  const res = await api().post(`/v1/instances/${name}/exec`).set(auth).buffer(true).send({ argv }).expect(checkContract).expect(200);
  const lines = res.text.trim().split('\n').map((line) => JSON.parse(line));
  if (lines.at(-1)?.type !== 'completed' || lines.at(-1).exit_code !== 0) return null;
  return lines.filter((l) => l.type === 'output' && l.stream === 'stdout').map((l) => Buffer.from(l.data_base64, 'base64').toString()).join('');
}
