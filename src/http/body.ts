// Reads a request body with a hard byte limit before anything parses it, so an over-size body is
// refused (413 P03) without being buffered whole.
import type { IncomingMessage } from 'node:http';
import { KisteError } from '../errors';

const EMPTY = Buffer.alloc(0);

export async function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) throw tooLarge(limit);
  if (req.headers['transfer-encoding'] === undefined && (req.headers['content-length'] === undefined || declared === 0)) {
    return EMPTY; // no body: nothing to wait for
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) {
      req.resume(); // drain the rest so the connection can answer
      throw tooLarge(limit);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

function tooLarge(limit: number): KisteError {
  return new KisteError('P03', { message: `Request body is larger than ${limit} bytes` });
}

/** The media type of a Content-Type header, without parameters, lower-cased. */
export function mediaTypeOf(header: string | undefined): string | null {
  if (!header) return null;
  return header.split(';')[0]!.trim().toLowerCase() || null;
}

export function parseBody(raw: Buffer, mediaType: string): unknown {
  const text = raw.toString('utf8');
  if (mediaType === 'application/x-www-form-urlencoded') return Object.fromEntries(new URLSearchParams(text));
  try {
    return JSON.parse(text);
  } catch {
    throw new KisteError('P02', { message: 'Request body is not valid JSON' });
  }
}
