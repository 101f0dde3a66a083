// The signature of the control plane ↔ worker protocol: a request counts once, only as sent, only
// within the clock window; an answer counts only for the request it answers.
import { randomBytes } from 'node:crypto';
import { answerSignedBy, RequestVerifier, signAnswer, signRequest, SIGNATURE_HEADERS, SKEW_MS } from '../../src/protocol/worker-signature';

const secret = randomBytes(32);
const body = Buffer.from('{"id":"m1"}');

test('a signed request verifies once; a replay of it is refused', () => {
  const verifier = new RequestVerifier(secret);
  const headers = signRequest(secret, 'POST', '/w1/machines/m1/start', body, Date.now(), 7);
  expect(verifier.verify('POST', '/w1/machines/m1/start', headers, body)).toEqual({ ok: true, nonce: headers[SIGNATURE_HEADERS.nonce], epoch: 7 });
  expect(verifier.verify('POST', '/w1/machines/m1/start', headers, body)).toEqual({ ok: false, reason: 'replayed' });
});

test('the fencing epoch is signed: a request cannot be moved to another epoch on the way, and a malformed one is unsigned', () => {
  const verifier = new RequestVerifier(secret);
  const headers = signRequest(secret, 'POST', '/w1/machines/m1/stop', body, Date.now(), 3);
  expect(verifier.verify('POST', '/w1/machines/m1/stop', { ...headers, [SIGNATURE_HEADERS.epoch]: '4' }, body)).toEqual({ ok: false, reason: 'bad_signature' });
  for (const epoch of ['', '-1', '03', '1.5', '99999999999', '2147483648']) {
    expect(verifier.verify('POST', '/w1/machines/m1/stop', { ...headers, [SIGNATURE_HEADERS.epoch]: epoch }, body)).toEqual({ ok: false, reason: 'unsigned' });
  }
  const { [SIGNATURE_HEADERS.epoch]: _, ...without } = headers;
  expect(verifier.verify('POST', '/w1/machines/m1/stop', without, body)).toEqual({ ok: false, reason: 'unsigned' });
  expect(verifier.verify('POST', '/w1/machines/m1/stop', headers, body)).toEqual({ ok: true, nonce: headers[SIGNATURE_HEADERS.nonce], epoch: 3 });
});

test('a changed method, path or body, or another secret, does not verify', () => {
  const verifier = new RequestVerifier(secret);
  const headers = signRequest(secret, 'POST', '/w1/machines/m1/start', body);
  expect(verifier.verify('DELETE', '/w1/machines/m1/start', headers, body)).toEqual({ ok: false, reason: 'bad_signature' });
  expect(verifier.verify('POST', '/w1/machines/m2/start', headers, body)).toEqual({ ok: false, reason: 'bad_signature' });
  expect(verifier.verify('POST', '/w1/machines/m1/start', headers, Buffer.from('{"id":"m2"}'))).toEqual({ ok: false, reason: 'bad_signature' });
  const foreign = signRequest(randomBytes(32), 'POST', '/w1/machines/m1/start', body);
  expect(verifier.verify('POST', '/w1/machines/m1/start', foreign, body)).toEqual({ ok: false, reason: 'bad_signature' });
  // A refused request does not use up its nonce: the genuine one still verifies.
  expect(verifier.verify('POST', '/w1/machines/m1/start', headers, body).ok).toBe(true);
});

test('times outside the window and malformed headers are refused', () => {
  const verifier = new RequestVerifier(secret);
  const now = Date.now();
  const old = signRequest(secret, 'GET', '/w1/hello', '', now - SKEW_MS - 1000);
  expect(verifier.verify('GET', '/w1/hello', old, Buffer.alloc(0), now)).toEqual({ ok: false, reason: 'stale' });
  const future = signRequest(secret, 'GET', '/w1/hello', '', now + SKEW_MS + 1000);
  expect(verifier.verify('GET', '/w1/hello', future, Buffer.alloc(0), now)).toEqual({ ok: false, reason: 'stale' });
  expect(verifier.verify('GET', '/w1/hello', {}, Buffer.alloc(0))).toEqual({ ok: false, reason: 'unsigned' });
  const good = signRequest(secret, 'GET', '/w1/hello', '');
  expect(verifier.verify('GET', '/w1/hello', { ...good, [SIGNATURE_HEADERS.nonce]: 'not hex' }, Buffer.alloc(0))).toEqual({ ok: false, reason: 'unsigned' });
  expect(verifier.verify('GET', '/w1/hello', { ...good, [SIGNATURE_HEADERS.time]: ['1', '2'] }, Buffer.alloc(0))).toEqual({ ok: false, reason: 'unsigned' });
});

test('the nonce memory is bounded: past its size, requests are refused rather than held', () => {
  const verifier = new RequestVerifier(secret, 3);
  for (let i = 0; i < 3; i++) expect(verifier.verify('GET', '/w1/hello', signRequest(secret, 'GET', '/w1/hello', ''), Buffer.alloc(0)).ok).toBe(true);
  expect(verifier.verify('GET', '/w1/hello', signRequest(secret, 'GET', '/w1/hello', ''), Buffer.alloc(0))).toEqual({ ok: false, reason: 'replayed' });
});

test('an answer verifies only for its request, status and body', () => {
  const signature = signAnswer(secret, 200, 'a'.repeat(32), '{"ok":true}');
  expect(answerSignedBy(secret, 200, 'a'.repeat(32), '{"ok":true}', signature)).toBe(true);
  expect(answerSignedBy(secret, 200, 'b'.repeat(32), '{"ok":true}', signature)).toBe(false);
  expect(answerSignedBy(secret, 500, 'a'.repeat(32), '{"ok":true}', signature)).toBe(false);
  expect(answerSignedBy(secret, 200, 'a'.repeat(32), '{"ok":false}', signature)).toBe(false);
  expect(answerSignedBy(secret, 200, 'a'.repeat(32), '{"ok":true}', undefined)).toBe(false);
});

test('a time from the future does not hold up forgetting the nonces after it', () => {
  const verifier = new RequestVerifier(secret, 3);
  const now = Date.now();
  expect(verifier.verify('GET', '/w1/hello', signRequest(secret, 'GET', '/w1/hello', '', now + SKEW_MS - 1000), Buffer.alloc(0), now).ok).toBe(true);
  expect(verifier.verify('GET', '/w1/hello', signRequest(secret, 'GET', '/w1/hello', '', now), Buffer.alloc(0), now).ok).toBe(true);
  expect(verifier.verify('GET', '/w1/hello', signRequest(secret, 'GET', '/w1/hello', '', now), Buffer.alloc(0), now).ok).toBe(true);
  // Later than twice the window, all three are forgotten and new requests are taken again.
  const later = now + 2 * SKEW_MS + 5000;
  expect(verifier.verify('GET', '/w1/hello', signRequest(secret, 'GET', '/w1/hello', '', later), Buffer.alloc(0), later).ok).toBe(true);
});
