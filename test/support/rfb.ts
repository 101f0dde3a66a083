// Test helpers around the service's RFB client (src/compute/rfb-client.ts): counting a frame's
// colours and typing plain keysyms.
import { RfbClient, type RfbFrame } from '../../src/compute/rfb-client';

export { RfbClient, type RfbFrame } from '../../src/compute/rfb-client';

/** Distinct pixel values of a frame (the unused byte ignored). */
export function colours(frame: RfbFrame): number {
  const seen = new Set<number>();
  for (let at = 0; at + 4 <= frame.pixels.length; at += 4) seen.add(frame.pixels.readUInt32LE(at) & 0xffffff);
  return seen.size;
}

/** Types printable ASCII with plain key events (keysym = the character's code; no Shift is sent). */
export function typeText(client: RfbClient, text: string): void {
  for (const char of text) {
    client.key(char.codePointAt(0)!, true);
    client.key(char.codePointAt(0)!, false);
  }
}
