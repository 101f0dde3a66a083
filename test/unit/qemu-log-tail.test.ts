// A QEMU that exits during its start is reported with what it printed: the end of its log, from
// after the start's own header line (the command line, thousands of characters of jail script,
// once filled the whole report and hid the error; found by the kill -9 recovery suite).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { logTail } from '../../src/compute/qemu';

describe('logTail', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kiste-log-tail-'));
  const log = join(dir, 'qemu.log');
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const header = (script: string) => `--- 2026-11-28T11:00:00.000Z /bin/sh -c '${script}'\n`;

  it('is what the last start printed, without its command line', () => {
    writeFileSync(log, `${header('a'.repeat(5000))}old error\n${header('b'.repeat(5000))}sh: 1: cannot create cgroup.procs: Directory nonexistent\n`);
    expect(logTail(log)).toBe('sh: 1: cannot create cgroup.procs: Directory nonexistent');
  });

  it('is empty when the last start printed nothing, and all of a log without headers', () => {
    writeFileSync(log, header('x'.repeat(100)));
    expect(logTail(log)).toBe('');
    writeFileSync(log, 'qemu-system-x86_64: some error\n');
    expect(logTail(log, 12)).toBe('some error');
  });

  it('is empty for a log that cannot be read', () => {
    expect(logTail(join(dir, 'missing.log'))).toBe('');
  });
});
