// Compares two strings in time that does not depend on where they differ (only their lengths may
// show): for secrets, signatures and tokens. Ground floor, so the protocol's signatures use it too.
import { timingSafeEqual } from 'node:crypto';

export function safeEqual(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}
