// SSH host keys made on the host for a new disk. Under TCG the guest's own `ssh-keygen -A` took
// 6–40 s (RSA prime search on an emulated CPU) on the path to a ready machine; here the same keys
// cost about a millisecond. The private halves go to the guest once, in the personalise request,
// and are kept nowhere on the host (only the public lines are recorded).
//
// The files are in OpenSSH's own private key format (PROTOCOL.key: "openssh-key-v1", unencrypted),
// which every sshd reads: Ed25519 and ECDSA P-256, the two types the image's sshd_config lists.
import { generateKeyPairSync, randomBytes } from 'node:crypto';

export interface HostKeyPair {
  /** "ssh-ed25519" or "ecdsa-sha2-nistp256" */
  algorithm: string;
  /** The private key file, "-----BEGIN OPENSSH PRIVATE KEY-----" … */
  privateKey: string;
  /** "algorithm base64" (the .pub file without a comment). */
  publicKey: string;
}

/** Ed25519 and ECDSA P-256 host keys, freshly generated. */
export function generateHostKeys(): HostKeyPair[] {
  return [ed25519(), ecdsaP256()];
}

function ed25519(): HostKeyPair {
  const jwk = generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' });
  const pub = Buffer.from(jwk.x as string, 'base64url');
  const seed = Buffer.from(jwk.d as string, 'base64url');
  const type = 'ssh-ed25519';
  const publicBlob = wire(str(type), str(pub));
  // The private part is the seed followed by the public key (64 bytes), as OpenSSH stores it.
  return pair(type, publicBlob, wire(str(type), str(pub), str(Buffer.concat([seed, pub]))));
}

function ecdsaP256(): HostKeyPair {
  const jwk = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'jwk' });
  const point = Buffer.concat([Buffer.from([4]), Buffer.from(jwk.x as string, 'base64url'), Buffer.from(jwk.y as string, 'base64url')]);
  const type = 'ecdsa-sha2-nistp256';
  const publicBlob = wire(str(type), str('nistp256'), str(point));
  return pair(type, publicBlob, wire(str(type), str('nistp256'), str(point), mpint(Buffer.from(jwk.d as string, 'base64url'))));
}

function pair(algorithm: string, publicBlob: Buffer, privateFields: Buffer): HostKeyPair {
  const check = randomBytes(4);
  let secret = wire(check, check, privateFields, str('')); // two equal check words, the key, an empty comment
  // Padded with 1, 2, 3, … to the cipher block size ("none": 8).
  const padding = (8 - (secret.length % 8)) % 8;
  secret = Buffer.concat([secret, Buffer.from(Array.from({ length: padding }, (_, i) => i + 1))]);
  const body = wire(Buffer.from('openssh-key-v1\0', 'latin1'), str('none'), str('none'), str(''), u32(1), str(publicBlob), str(secret));
  const lines = body.toString('base64').match(/.{1,70}/g) as string[];
  return {
    algorithm,
    privateKey: ['-----BEGIN OPENSSH PRIVATE KEY-----', ...lines, '-----END OPENSSH PRIVATE KEY-----', ''].join('\n'),
    publicKey: `${algorithm} ${publicBlob.toString('base64')}`,
  };
}

function u32(value: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(value);
  return b;
}

function str(value: string | Buffer): Buffer {
  const bytes = typeof value === 'string' ? Buffer.from(value, 'utf8') : value;
  return Buffer.concat([u32(bytes.length), bytes]);
}

/** A non-negative SSH mpint: big-endian, no leading zeros, a zero byte first if the top bit is set. */
function mpint(magnitude: Buffer): Buffer {
  let start = 0;
  while (start < magnitude.length && magnitude[start] === 0) start++;
  let bytes = magnitude.subarray(start);
  if (bytes.length > 0 && (bytes[0] as number) & 0x80) bytes = Buffer.concat([Buffer.from([0]), bytes]);
  return str(bytes);
}

function wire(...parts: Buffer[]): Buffer {
  return Buffer.concat(parts);
}
