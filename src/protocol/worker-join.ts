// How a worker on another host joins a control plane (issue 22, several hosts): the operator makes a
// join token on the control plane (`npm run admin -- worker add`) and starts the worker with it
// once. Both sides derive the worker's signing secret from the token, so the secret itself never
// travels; the control plane keeps its copy sealed and the worker writes its copy to its secret file
// (0600) on first start, after which the token is no longer needed. Ground floor: node's crypto only.
import { hkdfSync, randomBytes } from 'node:crypto';
import { MIN_SECRET_BYTES } from './worker-signature';

const PREFIX = 'kwj_';
/** kwj_ + 43 base64url characters (32 random bytes). */
const TOKEN_PATTERN = /^kwj_[A-Za-z0-9_-]{43}$/;

export class JoinTokenError extends Error {}

export function newJoinToken(): string {
  return PREFIX + randomBytes(32).toString('base64url');
}

/** The worker's signing secret, as both sides derive it from the join token. */
export function workerSecretOf(token: string): Buffer {
  if (!TOKEN_PATTERN.test(token)) throw new JoinTokenError('a join token is "kwj_" and 43 base64url characters, as `npm run admin -- worker add` prints it');
  return Buffer.from(hkdfSync('sha256', Buffer.from(token, 'utf8'), Buffer.alloc(0), 'kiste worker signing secret v1', MIN_SECRET_BYTES));
}
