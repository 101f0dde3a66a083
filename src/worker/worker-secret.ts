// The secret the control plane and a worker sign with. On one box both read the same file in the
// data folder, made once (0600, root's); between hosts the control plane keeps its copy encrypted.
// A file that someone else owns, others may read, or that is a link is refused: whoever planted it
// would know the secret.
import { randomBytes } from 'node:crypto';
import { closeSync, constants, fstatSync, linkSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { MIN_SECRET_BYTES } from '../protocol/worker-signature';
import { safeEqual } from '../protocol/safe-equal';

export class WorkerSecretError extends Error {
  /** The file is not there (the one case a first start may make it). */
  constructor(message: string, readonly missing = false) {
    super(message);
  }
}

/**
 * Reads the secret file (hex); `create`: writes one first when there is none — `joined` (the
 * secret a join token gives, between hosts) or a new random one (one box). A file already there
 * must hold `joined` when one is given: a worker joins one control plane at a time.
 */
export function readWorkerSecret(path: string, options: { create: boolean; joined?: Buffer }): Buffer {
  const secret = readSecretFile(path, options);
  if (options.joined && !safeEqual(secret.toString('hex'), options.joined.toString('hex'))) {
    throw new WorkerSecretError(`${path} holds the secret of an earlier join; remove it to join with this token`);
  }
  return secret;
}

function readSecretFile(path: string, options: { create: boolean; joined?: Buffer }): Buffer {
  let text: string;
  try {
    text = readPrivateFile(path, 'the worker secret file');
  } catch (error) {
    if (error instanceof WorkerSecretError && error.missing && options.create) return createSecret(path, options.joined ?? randomBytes(MIN_SECRET_BYTES));
    throw error;
  }
  return parseSecret(path, text);
}

/**
 * A file only this user may read (`what` names it in errors): not a link, a plain file of this
 * user's, no access for others; read through the one descriptor that was checked.
 */
export function readPrivateFile(path: string, what: string): string {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new WorkerSecretError(`${what} ${path} does not exist`, true);
    if (code === 'ELOOP') throw new WorkerSecretError(`${what} ${path} is a symbolic link`);
    throw new WorkerSecretError(`${what} ${path} cannot be read (${code ?? String(error)})`);
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) throw new WorkerSecretError(`${what} ${path} is not a file`);
    if (stat.uid !== process.getuid?.()) throw new WorkerSecretError(`${what} ${path} belongs to another user`);
    if ((stat.mode & 0o077) !== 0) throw new WorkerSecretError(`${what} ${path} may be read by others (chmod 600 it)`);
    return readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
}

/** Written whole under a private name and linked into place: a reader never sees it half-written, and a file already there wins. */
function createSecret(path: string, secret: Buffer): Buffer {
  const text = `${secret.toString('hex')}\n`;
  const staging = `${path}.${process.pid}.${randomBytes(4).toString('hex')}`;
  writeFileSync(staging, text, { mode: 0o600, flag: 'wx' });
  try {
    linkSync(staging, path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  } finally {
    rmSync(staging, { force: true });
  }
  return readSecretFile(path, { create: false });
}

function parseSecret(path: string, text: string): Buffer {
  const hex = text.trim();
  if (!/^[0-9a-f]+$/.test(hex) || hex.length < MIN_SECRET_BYTES * 2) {
    throw new WorkerSecretError(`the worker secret file ${path} must hold at least ${MIN_SECRET_BYTES} bytes as hex`);
  }
  return Buffer.from(hex, 'hex');
}
