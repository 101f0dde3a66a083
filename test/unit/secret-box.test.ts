// Secrets kept encrypted at rest: they open with the same installation secret and owner id only,
// and any change to the stored value is detected.
import { randomBytes } from 'node:crypto';
import { SecretBox } from '../../src/domain/secret-box';

describe('SecretBox', () => {
  const installation = randomBytes(32);
  const box = new SecretBox(installation, 'webhook signing secrets');
  const secret = `whsec_${randomBytes(32).toString('base64')}`;

  it('seals to a fresh value each time that holds no trace of the secret, and opens it again', () => {
    const one = box.seal(secret, 'endpoint-1');
    const two = box.seal(secret, 'endpoint-1');
    expect(one).not.toBe(two); // random nonce
    expect(one).toMatch(/^v1\.[A-Za-z0-9_-]+$/);
    expect(one).not.toContain(secret.slice(6, 20));
    expect(box.open(one, 'endpoint-1')).toBe(secret);
    expect(new SecretBox(installation, 'webhook signing secrets').open(two, 'endpoint-1')).toBe(secret);
  });

  it('refuses another owner id, another installation secret or purpose, and altered values', () => {
    const sealed = box.seal(secret, 'endpoint-1');
    expect(() => box.open(sealed, 'endpoint-2')).toThrow();
    expect(() => new SecretBox(randomBytes(32), 'webhook signing secrets').open(sealed, 'endpoint-1')).toThrow();
    expect(() => new SecretBox(installation, 'something else').open(sealed, 'endpoint-1')).toThrow();
    const raw = Buffer.from(sealed.slice(3), 'base64url');
    raw[raw.length - 1]! ^= 1;
    expect(() => box.open(`v1.${raw.toString('base64url')}`, 'endpoint-1')).toThrow();
    expect(() => box.open(sealed.slice(0, 20), 'endpoint-1')).toThrow();
    expect(() => box.open(secret, 'endpoint-1')).toThrow();
  });
});
