// Secrets kiste must be able to use again later (webhook signing secrets), kept encrypted at rest:
// AES-256-GCM with a key derived (HKDF-SHA256) from the installation secret, a random 96-bit nonce
// per value, and the owning record's id as associated data (a sealed value copied to another row
// does not open there). Stored form: `v1.` + base64url(nonce ‖ tag ‖ ciphertext).
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';

const VERSION = 'v1.';
const NONCE_BYTES = 12;
const TAG_BYTES = 16;

export class SecretBox {
  private readonly key: Buffer;

  /** `purpose` separates keys: the same installation secret gives a different key per purpose. */
  constructor(installationSecret: Buffer, purpose: string) {
    if (installationSecret.length === 0) throw new Error('SecretBox needs a non-empty installation secret');
    this.key = Buffer.from(hkdfSync('sha256', installationSecret, Buffer.alloc(0), `kiste secret-box ${purpose}`, 32));
  }

  seal(plaintext: string, boundTo: string): string {
    const nonce = randomBytes(NONCE_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.key, nonce);
    cipher.setAAD(Buffer.from(boundTo, 'utf8'));
    const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return VERSION + Buffer.concat([nonce, cipher.getAuthTag(), ciphertext]).toString('base64url');
  }

  /** Throws when the value was not sealed by this key for `boundTo` (or was altered). */
  open(sealed: string, boundTo: string): string {
    if (!sealed.startsWith(VERSION)) throw new Error('unknown sealed-secret format');
    const raw = Buffer.from(sealed.slice(VERSION.length), 'base64url');
    if (raw.length < NONCE_BYTES + TAG_BYTES) throw new Error('sealed secret is truncated');
    const decipher = createDecipheriv('aes-256-gcm', this.key, raw.subarray(0, NONCE_BYTES));
    decipher.setAAD(Buffer.from(boundTo, 'utf8'));
    decipher.setAuthTag(raw.subarray(NONCE_BYTES, NONCE_BYTES + TAG_BYTES));
    return Buffer.concat([decipher.update(raw.subarray(NONCE_BYTES + TAG_BYTES)), decipher.final()]).toString('utf8');
  }
}
