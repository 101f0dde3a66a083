// agent/build.ts: one self-contained file for Node 18, the same bytes for the same sources.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const REPO = resolve(__dirname, '../..');

test('the bundle is deterministic and self-contained', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kiste-agent-build-'));
  try {
    const build = (name: string) => {
      const outfile = join(dir, name);
      execFileSync(join(REPO, 'node_modules/.bin/tsx'), [join(REPO, 'agent/build.ts'), '--outfile', outfile], { cwd: REPO, stdio: 'pipe' });
      return readFileSync(outfile);
    };
    const a = build('a.js');
    const b = build('b.js');
    expect(a.equals(b)).toBe(true);
    const text = a.toString('utf8');
    expect(text.startsWith('#!/usr/bin/env node\n// kiste guest agent 0.1.0+')).toBe(true);
    expect(statSync(join(dir, 'a.js')).mode & 0o111).not.toBe(0);
    // Only Node's own modules are required: nothing from node_modules has to exist in the guest.
    const required = [...text.matchAll(/require\("([^"]+)"\)/g)].map((m) => m[1]);
    expect(required.length).toBeGreaterThan(0);
    expect(required.every((name) => name.startsWith('node:'))).toBe(true);
    execFileSync(process.execPath, ['--check', join(dir, 'a.js')]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
