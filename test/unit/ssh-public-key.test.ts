// parsePublicKey against real ssh-keygen output and hand-built bad blobs.
import { createHash, randomBytes } from 'node:crypto';
import { parsePublicKey, PublicKeyError } from '../../src/domain/ssh-public-key';
import { blobLine, blobOf, SshKey, SshKeyFactory, sshKeygenSupportsDsa, sshString } from '../fixtures/account-access';

function rejects(line: string, reason: RegExp): void {
  let thrown: unknown;
  try {
    parsePublicKey(line);
  } catch (error) {
    thrown = error;
  }
  expect(thrown).toBeInstanceOf(PublicKeyError);
  expect((thrown as Error).message).toMatch(reason);
}

describe('parsePublicKey', () => {
  const keys = new SshKeyFactory();
  let ed25519: SshKey;
  let ecdsa256: SshKey;
  let ecdsa384: SshKey;
  let ecdsa521: SshKey;
  let rsa2048: SshKey;
  let rsa4096: SshKey;
  let rsa1024: SshKey;

  beforeAll(() => {
    ed25519 = keys.generate('ed25519');
    ecdsa256 = keys.generate('ecdsa', 256);
    ecdsa384 = keys.generate('ecdsa', 384);
    ecdsa521 = keys.generate('ecdsa', 521);
    rsa2048 = keys.generate('rsa', 2048);
    rsa4096 = keys.generate('rsa', 4096);
    rsa1024 = keys.generate('rsa', 1024);
  });
  afterAll(() => keys.cleanup());

  describe('accepts real ssh-keygen keys', () => {
    const cases: [string, () => SshKey, string, number][] = [
      ['ed25519', () => ed25519, 'ssh-ed25519', 256],
      ['ecdsa 256', () => ecdsa256, 'ecdsa-sha2-nistp256', 256],
      ['ecdsa 384', () => ecdsa384, 'ecdsa-sha2-nistp384', 384],
      ['ecdsa 521', () => ecdsa521, 'ecdsa-sha2-nistp521', 521],
      ['rsa 2048', () => rsa2048, 'ssh-rsa', 2048],
      ['rsa 4096', () => rsa4096, 'ssh-rsa', 4096],
    ];
    it.each(cases)('%s: algorithm, bits, line and the ssh-keygen fingerprint', (_name, key, algorithm, bits) => {
      const parsed = parsePublicKey(key().publicKey);
      expect(parsed.algorithm).toBe(algorithm);
      expect(parsed.bits).toBe(bits);
      expect(parsed.bits).toBe(key().reportedBits);
      expect(parsed.fingerprint).toBe(key().fingerprint);
      expect(parsed.fingerprint).toMatch(/^SHA256:[A-Za-z0-9+/]{43}$/);
      expect(parsed.line).toBe(key().publicKey);
    });
  });

  it('keeps the comment, normalises surrounding and inner whitespace', () => {
    const [type, data] = ed25519.publicKey.split(' ') as [string, string];
    const parsed = parsePublicKey(`  ${type}\t${data}   alice@laptop   work  `);
    expect(parsed.line).toBe(`${type} ${data} alice@laptop work`);
    expect(parsed.fingerprint).toBe(ed25519.fingerprint);
  });

  it('accepts a key without a comment', () => {
    const [type, data] = ecdsa256.publicKey.split(' ') as [string, string];
    const parsed = parsePublicKey(`${type} ${data}`);
    expect(parsed.line).toBe(`${type} ${data}`);
    expect(parsed.fingerprint).toBe(ecdsa256.fingerprint);
  });

  it('accepts the contents of a .pub file, trailing newline included', () => {
    for (const key of [ed25519, rsa2048]) {
      expect(parsePublicKey(`${key.publicKey}\n`).fingerprint).toBe(key.fingerprint);
      expect(parsePublicKey(`${key.publicKey}\r\n`).fingerprint).toBe(key.fingerprint);
    }
  });

  it('the fingerprint does not depend on the comment', () => {
    const [type, data] = rsa4096.publicKey.split(' ') as [string, string];
    expect(parsePublicKey(`${type} ${data} one`).fingerprint).toBe(parsePublicKey(`${type} ${data} two`).fingerprint);
  });

  it('refuses RSA below 2048 bits', () => {
    rejects(rsa1024.publicKey, /1024 bits; at least 2048/);
  });

  it('refuses DSA keys (when this ssh-keygen still makes them) and unknown types', () => {
    if (sshKeygenSupportsDsa(keys)) rejects(keys.generate('dsa').publicKey, /"ssh-dss" is not accepted/);
    rejects(blobLine('ssh-dss', [sshString('ssh-dss'), sshString(randomBytes(129))]), /"ssh-dss" is not accepted/);
    rejects(blobLine('sk-ssh-ed25519@openssh.com', [sshString('sk-ssh-ed25519@openssh.com'), sshString(randomBytes(32))]), /not accepted/);
  });

  describe('refuses malformed lines', () => {
    it('one word, empty or blank input', () => {
      rejects('ssh-ed25519', /expected one line/);
      rejects('', /expected one line/);
      rejects('   \n ', /expected one line/);
    });

    it('two keys on two lines', () => {
      rejects(`${ed25519.publicKey}\n${ecdsa256.publicKey}`, /expected one line/);
      rejects(`${ed25519.publicKey}\r\n${ecdsa256.publicKey}`, /expected one line/);
      const [type, data] = ed25519.publicKey.split(' ') as [string, string];
      rejects(`${type}\n${data}`, /expected one line/);
    });

    it('data that is not base64', () => {
      const [type, data] = ed25519.publicKey.split(' ') as [string, string];
      rejects(`${type} ${data.slice(0, 10)}!${data.slice(11)}`, /not base64/);
      rejects(`${type} ${data.replace(/=*$/, '')}-_`, /not base64/);
      rejects(`${type} ===`, /not base64/);
    });

    it('key type that does not match the type inside the blob', () => {
      const [, data] = ed25519.publicKey.split(' ') as [string, string];
      rejects(`ssh-rsa ${data}`, /"ssh-rsa" does not match its data \("ssh-ed25519"\)/);
      const [, ecdsaData] = ecdsa384.publicKey.split(' ') as [string, string];
      rejects(`ecdsa-sha2-nistp256 ${ecdsaData}`, /does not match its data/);
    });
  });

  describe('refuses hand-built bad blobs', () => {
    it('a blob cut short (every real key type)', () => {
      for (const key of [ed25519, ecdsa256, ecdsa521, rsa2048]) {
        const blob = blobOf(key.publicKey);
        const type = key.publicKey.split(' ')[0]!;
        rejects(`${type} ${blob.subarray(0, blob.length - 1).toString('base64')}`, /truncated/);
        rejects(`${type} ${blob.subarray(0, blob.length - 20).toString('base64')}`, /truncated/);
      }
    });

    it('a blob shorter than its first length prefix', () => {
      rejects(`ssh-ed25519 ${Buffer.from([0, 0, 0]).toString('base64')}`, /truncated/);
      rejects(`ssh-ed25519 ${Buffer.from([0, 0, 0, 11, 0x73]).toString('base64')}`, /truncated/);
      rejects(`ssh-ed25519 ${Buffer.from([0xff, 0xff, 0xff, 0xff, 0, 0]).toString('base64')}`, /truncated/);
    });

    it('a blob with trailing bytes', () => {
      for (const key of [ed25519, ecdsa384, rsa2048]) {
        const type = key.publicKey.split(' ')[0]!;
        const blob = Buffer.concat([blobOf(key.publicKey), Buffer.from([0])]);
        rejects(`${type} ${blob.toString('base64')}`, /trailing bytes/);
      }
    });

    it('ed25519 with a key of the wrong size', () => {
      rejects(blobLine('ssh-ed25519', [sshString('ssh-ed25519'), sshString(randomBytes(31))]), /32 bytes/);
      rejects(blobLine('ssh-ed25519', [sshString('ssh-ed25519'), sshString(randomBytes(33))]), /32 bytes/);
    });

    it('ecdsa with a wrong curve name or a malformed point', () => {
      const point = Buffer.concat([Buffer.from([4]), randomBytes(64)]);
      rejects(blobLine('ecdsa-sha2-nistp256', [sshString('ecdsa-sha2-nistp256'), sshString('nistp384'), sshString(point)]), /curve/);
      rejects(blobLine('ecdsa-sha2-nistp256', [sshString('ecdsa-sha2-nistp256'), sshString('nistp256'), sshString(point.subarray(0, 64))]), /point/);
      const compressed = Buffer.concat([Buffer.from([2]), randomBytes(64)]);
      rejects(blobLine('ecdsa-sha2-nistp256', [sshString('ecdsa-sha2-nistp256'), sshString('nistp256'), sshString(compressed)]), /point/);
      const p384 = Buffer.concat([Buffer.from([4]), randomBytes(96)]);
      rejects(blobLine('ecdsa-sha2-nistp521', [sshString('ecdsa-sha2-nistp521'), sshString('nistp521'), sshString(p384)]), /point/);
    });

    it('a well-formed hand-built ecdsa blob is accepted and fingerprinted over the blob', () => {
      const blob = Buffer.concat([sshString('ecdsa-sha2-nistp256'), sshString('nistp256'), sshString(Buffer.concat([Buffer.from([4]), randomBytes(64)]))]);
      const parsed = parsePublicKey(`ecdsa-sha2-nistp256 ${blob.toString('base64')}`);
      expect(parsed.bits).toBe(256);
      const expected = 'SHA256:' + createHash('sha256').update(blob).digest('base64').replace(/=+$/, '');
      expect(parsed.fingerprint).toBe(expected);
    });

    it('rsa: modulus below 2048 bits counted without leading zero bytes; zero exponent', () => {
      const exponent = Buffer.from([1, 0, 1]);
      // 2047-bit modulus written with a leading zero byte (mpint) must still count as 2047 bits.
      const small = Buffer.concat([Buffer.from([0, 0x7f]), randomBytes(255)]);
      rejects(blobLine('ssh-rsa', [sshString('ssh-rsa'), sshString(exponent), sshString(small)]), /2047 bits/);
      const padded = Buffer.concat([Buffer.alloc(8), Buffer.from([0x80]), randomBytes(127)]);
      rejects(blobLine('ssh-rsa', [sshString('ssh-rsa'), sshString(exponent), sshString(padded)]), /1024 bits/);
      const modulus = Buffer.concat([Buffer.from([0, 0x80]), randomBytes(255)]);
      rejects(blobLine('ssh-rsa', [sshString('ssh-rsa'), sshString(Buffer.from([0])), sshString(modulus)]), /exponent is zero/);
      rejects(blobLine('ssh-rsa', [sshString('ssh-rsa'), sshString(Buffer.alloc(0)), sshString(modulus)]), /exponent is zero/);
      const ok = parsePublicKey(blobLine('ssh-rsa', [sshString('ssh-rsa'), sshString(exponent), sshString(modulus)]));
      expect(ok.bits).toBe(2048);
    });

    it('rsa blob missing its modulus', () => {
      rejects(blobLine('ssh-rsa', [sshString('ssh-rsa'), sshString(Buffer.from([1, 0, 1]))]), /truncated/);
    });
  });
});
