// A unix-socket server that stands in for one of QEMU's (its monitor, its VNC server) in tests that
// feed the service's clients hostile bytes: `onSocket` plays the peer; close() ends every connection.
import { createServer, type Server, type Socket } from 'node:net';

export interface StandInServer {
  path: string;
  close(): Promise<void>;
}

export async function standInServer(path: string, onSocket: (socket: Socket) => void): Promise<StandInServer> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
    onSocket(socket);
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  return {
    path,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
