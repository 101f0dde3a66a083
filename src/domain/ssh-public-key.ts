// Validates an OpenSSH public key line ("<type> <base64> [comment]") by decoding its wire-format
// blob: ed25519, ecdsa (nistp256/384/521) and RSA of at least 2048 bits are accepted.
import { createHash } from 'node:crypto';

export interface ParsedPublicKey {
  algorithm: string;
  /** The normalised line: type, base64 and comment (if any). */
  line: string;
  /** SHA256:<base64 without padding>, as ssh-keygen -l prints it. */
  fingerprint: string;
  bits: number;
}

export class PublicKeyError extends Error {}

const ECDSA_CURVES: Record<string, { curve: string; pointLength: number; bits: number }> = {
  'ecdsa-sha2-nistp256': { curve: 'nistp256', pointLength: 65, bits: 256 },
  'ecdsa-sha2-nistp384': { curve: 'nistp384', pointLength: 97, bits: 384 },
  'ecdsa-sha2-nistp521': { curve: 'nistp521', pointLength: 133, bits: 521 },
};

class BlobReader {
  private offset = 0;
  constructor(private readonly blob: Buffer) {}

  string(): Buffer {
    if (this.offset + 4 > this.blob.length) throw new PublicKeyError('key data is truncated');
    const length = this.blob.readUInt32BE(this.offset);
    this.offset += 4;
    if (this.offset + length > this.blob.length) throw new PublicKeyError('key data is truncated');
    const value = this.blob.subarray(this.offset, this.offset + length);
    this.offset += length;
    return value;
  }

  end(): void {
    if (this.offset !== this.blob.length) throw new PublicKeyError('key data has trailing bytes');
  }
}

function bitLength(mpint: Buffer): number {
  let start = 0;
  while (start < mpint.length && mpint[start] === 0) start++;
  if (start === mpint.length) return 0;
  return (mpint.length - start - 1) * 8 + (32 - Math.clz32(mpint[start]!));
}

export function parsePublicKey(input: string): ParsedPublicKey {
  // The contents of a .pub file end in a newline: only a line break inside the key is refused.
  const trimmed = input.trim();
  const parts = trimmed.split(/\s+/);
  if (parts.length < 2 || /[\r\n]/.test(trimmed)) throw new PublicKeyError('expected one line "<type> <base64> [comment]"');
  const [algorithm, encoded, ...comment] = parts as [string, string, ...string[]];
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) throw new PublicKeyError('key data is not base64');
  const blob = Buffer.from(encoded, 'base64');
  const reader = new BlobReader(blob);
  const declared = reader.string().toString('latin1');
  if (declared !== algorithm) throw new PublicKeyError(`key type "${algorithm}" does not match its data ("${declared}")`);
  let bits: number;
  if (algorithm === 'ssh-ed25519') {
    if (reader.string().length !== 32) throw new PublicKeyError('ed25519 key must be 32 bytes');
    bits = 256;
  } else if (algorithm in ECDSA_CURVES) {
    const expected = ECDSA_CURVES[algorithm]!;
    if (reader.string().toString('latin1') !== expected.curve) throw new PublicKeyError('ecdsa curve does not match the key type');
    const point = reader.string();
    if (point.length !== expected.pointLength || point[0] !== 0x04) throw new PublicKeyError('ecdsa point is malformed');
    bits = expected.bits;
  } else if (algorithm === 'ssh-rsa') {
    const exponent = reader.string();
    bits = bitLength(reader.string());
    if (bitLength(exponent) === 0) throw new PublicKeyError('rsa exponent is zero');
    if (bits < 2048) throw new PublicKeyError(`rsa key has ${bits} bits; at least 2048 are required`);
  } else {
    throw new PublicKeyError(`key type "${algorithm}" is not accepted (use ssh-ed25519, ecdsa-sha2-nistp256/384/521 or ssh-rsa ≥ 2048 bits)`);
  }
  reader.end();
  const fingerprint = 'SHA256:' + createHash('sha256').update(blob).digest('base64').replace(/=+$/, '');
  return { algorithm, line: [algorithm, encoded, ...comment].join(' '), fingerprint, bits };
}
