// Tokens, hashes and the password KDF. Token values are high-entropy, so a SHA-256 of the value is
// what we store and look up; passwords are low-entropy, so they get scrypt (memory-hard) and a salt.
import { createHash, createHmac, randomBytes, randomUUID, scrypt, timingSafeEqual } from 'node:crypto';

/** Prefixes say what a secret is, so a leaked one is easy to recognise and scan for. */
export const TOKEN_PREFIX = {
  apiKey: 'kiste_key_',
  cliToken: 'kiste_cli_',
  browserSession: 'kiste_web_',
  browserId: 'kiste_brw_',
  oauthCode: 'kiste_code_',
  exportToken: 'kiste_exp_',
  serviceCode: 'kiste_svcc_',
  serviceCookie: 'kiste_svck_',
  serviceToken: 'kiste_svct_',
} as const;

export function newId(): string {
  return randomUUID();
}

export function newToken(prefix: string): string {
  return prefix + randomBytes(32).toString('base64url');
}

export function sha256Hex(value: string): string {
  return createHash('sha256').update(value).digest('hex');
}

export function sha256Base64Url(value: string): string {
  return createHash('sha256').update(value).digest('base64url');
}

export function hmacBase64Url(key: Buffer, value: string): string {
  return createHmac('sha256', key).update(value).digest('base64url');
}

/** Non-secret reminder of a token: its prefix and last four characters. */
export function tokenHint(token: string, prefix: string): string {
  return `${prefix}…${token.slice(-4)}`;
}

// scrypt N=2^15, r=8: 32 MiB per hash, about 0.1 s on these machines.
const SCRYPT = { N: 1 << 15, r: 8, p: 1, keyLength: 32 };

function scryptAsync(password: string, salt: Buffer, N: number, r: number, p: number, keyLength: number): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scrypt(password, salt, keyLength, { N, r, p, maxmem: 256 * N * r }, (error, key) => (error ? reject(error) : resolve(key))),
  );
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scryptAsync(password, salt, SCRYPT.N, SCRYPT.r, SCRYPT.p, SCRYPT.keyLength);
  return ['scrypt', SCRYPT.N, SCRYPT.r, SCRYPT.p, salt.toString('base64'), key.toString('base64')].join('$');
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [scheme, n, r, p, salt, key] = stored.split('$');
  if (scheme !== 'scrypt' || !salt || !key) return false;
  const expected = Buffer.from(key, 'base64');
  const actual = await scryptAsync(password, Buffer.from(salt, 'base64'), Number(n), Number(r), Number(p), expected.length);
  return timingSafeEqual(actual, expected);
}

/** A hash to compare against when the account does not exist, so timing does not reveal it. */
let decoyHash: Promise<string> | undefined;
export function decoyPasswordHash(): Promise<string> {
  decoyHash ??= hashPassword(randomBytes(16).toString('hex'));
  return decoyHash;
}
