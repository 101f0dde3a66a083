// The one rule for every value a guest or its QEMU sends (agent frames, agent events and results,
// QMP lines, RFB messages): it is parsed against a declared shape before kiste acts on it, a value
// that does not fit is dropped with a warning, and a link that keeps sending garbage is closed (its
// owner reopens it) — never a throw into an event handler.
//
// Why TypeBox compiled by ajv: ajv already validates every API request, so there is one validator
// engine in the service; TypeBox declares a shape once and gives both the JSON Schema ajv compiles
// and the TypeScript type (`Static<typeof Shape>`), so the type a caller sees cannot drift from the
// check that produced it. Bounds (lengths, ranges, finite numbers) live in the same declaration.
import { Ajv } from 'ajv';
import type { Static, TSchema } from '@sinclair/typebox';

// strictNumbers (ajv's default) refuses NaN and ±Infinity, which JSON.parse makes of 1e999.
const ajv = new Ajv({ strict: true, allErrors: false, coerceTypes: false, useDefaults: false, removeAdditional: false, allowUnionTypes: true });

export type Parsed<T> = { ok: true; value: T } | { ok: false; reason: string };

/** A declared shape of something a peer sends. */
export interface PeerShape<T> {
  readonly name: string;
  parse(value: unknown): Parsed<T>;
}

const MAX_REASON = 200;

export function peerShape<S extends TSchema>(name: string, schema: S): PeerShape<Static<S>> {
  const validate = ajv.compile(schema);
  return {
    name,
    parse(value) {
      if (validate(value)) return { ok: true, value: value as Static<S> };
      return { ok: false, reason: ajv.errorsText(validate.errors, { dataVar: name }).slice(0, MAX_REASON) };
    },
  };
}

/** JSON text from a peer, parsed into a shape; never throws. */
export function parsePeerJson<T>(shape: PeerShape<T>, text: string | Buffer): Parsed<T> {
  let value: unknown;
  try {
    value = JSON.parse(typeof text === 'string' ? text : text.toString('utf8'));
  } catch {
    return { ok: false, reason: `${shape.name}: not JSON` };
  }
  return shape.parse(value);
}

/**
 * Counts what one link's peer got wrong. Each bad value is dropped (and logged by the caller); past
 * `limit` of them within `windowMs` the link is given up (`onLimit`), so a peer that floods garbage
 * costs a reconnect, not the service's CPU or log.
 */
export class PeerStrikes {
  private times: number[] = [];

  constructor(
    private readonly onLimit: (reason: string) => void,
    private readonly limit = 20,
    private readonly windowMs = 10_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** Records one bad value; true when this one crossed the limit (onLimit has run). */
  strike(reason: string): boolean {
    const now = this.now();
    this.times = this.times.filter((t) => now - t < this.windowMs);
    this.times.push(now);
    if (this.times.length < this.limit) return false;
    this.times = [];
    this.onLimit(reason);
    return true;
  }

  reset(): void {
    this.times = [];
  }
}

/**
 * Text a peer sent, fit to go into someone's message, log line or page: at most `max` characters,
 * line breaks and tabs as spaces, other control and format characters (escape sequences, bidi
 * overrides, lone surrogates) as U+FFFD.
 */
export function peerText(text: string, max: number): string {
  return text
    .slice(0, max)
    .replace(/[\t\n\r]/g, ' ')
    .replace(/[\p{Cc}\p{Cf}\p{Cs}]/gu, '\uFFFD');
}
