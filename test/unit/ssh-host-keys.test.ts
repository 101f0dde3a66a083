// Host-made SSH host keys: OpenSSH's own ssh-keygen must read each private key file, derive the same
// public key from it, and see the type we claim; every call makes different keys.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateHostKeys } from '../../src/compute/ssh-host-keys';
import { parsePublicKey } from '../../src/domain/ssh-public-key';

describe('generateHostKeys', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kiste-hostkeys-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('makes Ed25519 and ECDSA P-256 keys that ssh-keygen reads back to the same public key', () => {
    const keys = generateHostKeys();
    expect(keys.map((k) => k.algorithm)).toEqual(['ssh-ed25519', 'ecdsa-sha2-nistp256']);
    for (const key of keys) {
      const file = join(dir, key.algorithm);
      writeFileSync(file, key.privateKey, { mode: 0o600 });
      const derived = execFileSync('ssh-keygen', ['-y', '-f', file], { encoding: 'utf8' }).trim();
      expect(derived.split(/\s+/).slice(0, 2).join(' ')).toBe(key.publicKey);
      expect(parsePublicKey(key.publicKey).algorithm).toBe(key.algorithm);
      const fingerprint = execFileSync('ssh-keygen', ['-l', '-f', file], { encoding: 'utf8' });
      expect(fingerprint).toContain(parsePublicKey(key.publicKey).fingerprint);
      expect(fingerprint).toMatch(key.algorithm === 'ssh-ed25519' ? /\(ED25519\)/ : /256 .*\(ECDSA\)/);
    }
  });

  test('every call makes new keys', () => {
    const [a, b] = [generateHostKeys(), generateHostKeys()];
    expect(a[0]!.publicKey).not.toBe(b[0]!.publicKey);
    expect(a[1]!.privateKey).not.toBe(b[1]!.privateKey);
  });
});
