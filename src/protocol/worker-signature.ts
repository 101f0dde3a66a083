// How the control plane and a kiste-worker prove each message is the other's (worker-api.yaml,
// "workerSignature"). A request is signed over its method, path, time, nonce and body; the answer is
// signed over its status, the request's nonce and its body, so an answer cannot be replayed onto
// another request. HMAC-SHA256 with the worker's secret; times older or newer than SKEW_MS and
// nonces seen before are refused. A request also names the fencing epoch it was sent under (the
// worker refuses machine commands of any other epoch; src/worker/worker-fencing.ts), signed with the
// rest so nobody on the way can change it. Ground floor: node's crypto only.
import { createHash, createHmac, randomBytes } from 'node:crypto';
import { safeEqual } from './safe-equal';

export const SIGNATURE_HEADERS = { time: 'x-kiste-time', nonce: 'x-kiste-nonce', epoch: 'x-kiste-epoch', signature: 'x-kiste-signature' } as const;
/** The largest epoch (the control plane keeps it in an integer column). */
export const MAX_EPOCH = 2_147_483_647;
/** How far a signed time may be from the verifier's clock. */
export const SKEW_MS = 30_000;
/** Secrets are at least this long (bytes), as the worker's secret file holds them (hex). */
export const MIN_SECRET_BYTES = 32;

export type SignedHeaders = Record<(typeof SIGNATURE_HEADERS)[keyof typeof SIGNATURE_HEADERS], string>;

const sha256 = (body: Buffer | string) => createHash('sha256').update(body).digest('hex');

function mac(secret: Buffer, parts: string[]): string {
  return createHmac('sha256', secret).update(parts.join('\n')).digest('hex');
}

/** `epoch`: the fencing epoch the sender knows the worker by (0 before it was adopted). */
export function signRequest(secret: Buffer, method: string, path: string, body: Buffer | string, now = Date.now(), epoch = 0): SignedHeaders {
  const time = String(now);
  const nonce = randomBytes(16).toString('hex');
  return {
    [SIGNATURE_HEADERS.time]: time,
    [SIGNATURE_HEADERS.nonce]: nonce,
    [SIGNATURE_HEADERS.epoch]: String(epoch),
    [SIGNATURE_HEADERS.signature]: mac(secret, ['request', method.toUpperCase(), path, time, nonce, String(epoch), sha256(body)]),
  };
}

export function signAnswer(secret: Buffer, status: number, requestNonce: string, body: Buffer | string): string {
  return mac(secret, ['answer', String(status), requestNonce, sha256(body)]);
}

export function answerSignedBy(secret: Buffer, status: number, requestNonce: string, body: Buffer | string, signature: string | undefined): boolean {
  return typeof signature === 'string' && safeEqual(signature, signAnswer(secret, status, requestNonce, body));
}

/** Why a request was refused, for the log (the peer only learns that it was). */
export type RequestRefusal = 'unsigned' | 'stale' | 'replayed' | 'bad_signature';

/**
 * Checks signed requests and remembers their nonces for as long as their time is acceptable, so
 * each is taken once. Bounded: past `maxNonces` in one window, requests are refused rather than held.
 */
export class RequestVerifier {
  private readonly seen = new Map<string, number>();

  constructor(
    private readonly secret: Buffer,
    private readonly maxNonces = 100_000,
  ) {}

  /** What can be told before the body is read: the signature's headers are there, well formed and of now (a peer that fails this gets no body read). */
  precheck(headers: Record<string, string | string[] | undefined>, now = Date.now()): RequestRefusal | null {
    const time = single(headers[SIGNATURE_HEADERS.time]);
    const nonce = single(headers[SIGNATURE_HEADERS.nonce]);
    const epoch = single(headers[SIGNATURE_HEADERS.epoch]);
    const signature = single(headers[SIGNATURE_HEADERS.signature]);
    if (!time || !nonce || !signature || !epoch || !/^\d{1,15}$/.test(time) || !/^[0-9a-f]{32}$/.test(nonce) || !/^(0|[1-9]\d{0,9})$/.test(epoch) || Number(epoch) > MAX_EPOCH) return 'unsigned';
    if (Math.abs(now - Number(time)) > SKEW_MS) return 'stale';
    return null;
  }

  verify(method: string, path: string, headers: Record<string, string | string[] | undefined>, body: Buffer, now = Date.now()): { ok: true; nonce: string; epoch: number } | { ok: false; reason: RequestRefusal } {
    const refusal = this.precheck(headers, now);
    if (refusal) return { ok: false, reason: refusal };
    const time = single(headers[SIGNATURE_HEADERS.time])!;
    const nonce = single(headers[SIGNATURE_HEADERS.nonce])!;
    const epoch = single(headers[SIGNATURE_HEADERS.epoch])!;
    const signature = single(headers[SIGNATURE_HEADERS.signature])!;
    if (!safeEqual(signature, mac(this.secret, ['request', method.toUpperCase(), path, time, nonce, epoch, sha256(body)]))) return { ok: false, reason: 'bad_signature' };
    this.forgetOld(now);
    if (this.seen.has(nonce) || this.seen.size >= this.maxNonces) return { ok: false, reason: 'replayed' };
    // Remembered from now at the latest: a time from the future must not hold up the forgetting of
    // everything after it (the map is in arrival order).
    this.seen.set(nonce, Math.min(Number(time), now));
    return { ok: true, nonce, epoch: Number(epoch) };
  }

  /** Oldest first (the map keeps arrival order, near enough time order): a stale time is refused anyway. */
  private forgetOld(now: number): void {
    for (const [nonce, time] of this.seen) {
      if (now - time <= 2 * SKEW_MS) break;
      this.seen.delete(nonce);
    }
  }
}

function single(value: string | string[] | undefined): string | undefined {
  return typeof value === 'string' ? value : undefined;
}
