// What every benchmark script needs: progress lines on stderr and an HTTP server on a free
// loopback port that closes with its connections.
import type { Server } from 'node:http';

export function log(message: string): void {
  process.stderr.write(`bench: ${message}\n`);
}

/** Listens on 127.0.0.1 on a free port; resolves with the base URL. */
export function listen(server: Server): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      if (address === null || typeof address === 'string') return reject(new Error('no TCP address'));
      resolve(`http://127.0.0.1:${address.port}`);
    });
  });
}

export function close(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}
