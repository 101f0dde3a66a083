// The worker's secret file: made once, 0600, never half-written; one that is a link, belongs to
// someone else or may be read by others is refused (whoever planted it would know the secret).
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readWorkerSecret, WorkerSecretError } from '../../src/worker/worker-secret';

let dir: string;
beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'kiste-secret-'))));
afterEach(() => rmSync(dir, { recursive: true, force: true }));

test('made on first use, 0600, and read back the same', () => {
  const path = join(dir, 'worker.secret');
  expect(() => readWorkerSecret(path, { create: false })).toThrow(WorkerSecretError);
  const made = readWorkerSecret(path, { create: true });
  expect(made.length).toBe(32);
  expect(statSync(path).mode & 0o777).toBe(0o600);
  expect(readWorkerSecret(path, { create: true })).toEqual(made);
  expect(readFileSync(path, 'utf8').trim()).toBe(made.toString('hex'));
});

test('a link, a file others may read, and a short secret are refused', () => {
  const real = join(dir, 'real');
  writeFileSync(real, `${'ab'.repeat(32)}\n`, { mode: 0o600 });
  symlinkSync(real, join(dir, 'link'));
  expect(() => readWorkerSecret(join(dir, 'link'), { create: true })).toThrow(/symbolic link/);
  chmodSync(real, 0o644);
  expect(() => readWorkerSecret(real, { create: false })).toThrow(/read by others/);
  const short = join(dir, 'short');
  writeFileSync(short, 'abcd\n', { mode: 0o600 });
  expect(() => readWorkerSecret(short, { create: false })).toThrow(/at least 32 bytes/);
});
