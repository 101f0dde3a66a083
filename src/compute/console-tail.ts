// The last lines of a machine's serial console log, which QEMU (running as the machine's user)
// writes: opened only as a regular file, never through a link or into a FIFO.
import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs';

export function readConsoleTail(file: string, lines: number): string {
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return '';
  }
  let buffer: Buffer;
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) return '';
    const length = Math.min(stat.size, lines * 512, 4 << 20); // enough bytes for the lines asked for
    buffer = Buffer.alloc(length);
    readSync(fd, buffer, 0, length, stat.size - length);
  } finally {
    closeSync(fd);
  }
  return buffer.toString('utf8').split(/\r?\n/).slice(-lines - 1).join('\n').replace(/^\n/, '');
}
