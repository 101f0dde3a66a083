// WebSocket endpoints. An upgrade request goes through the same app and pipeline as any request
// (route, credential, budget, validation, error envelope) and the handler decides: it accepts the
// upgrade, or throws and the client gets the HTTP error with the envelope, before any handshake.
//
// `ws` is used directly (noServer) rather than express-ws: express-ws completes the handshake
// before the route runs, so a refusal (401, 409 K03/K04/L07) could only be a close frame after a
// 101, while the spec answers these before the upgrade.
import { IncomingMessage, ServerResponse, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import type { SshTunnel, TunnelEnd, TunnelPeer } from '../domain/ssh-tunnels';
import type { TerminalPeer, TerminalSession } from '../domain/terminals';
import type { DesktopStream } from '../domain/desktops';
import { bufferOf, isWebSocketHandshake, upgradeResponse } from '../net/websocket';

/** What a handler gets for an upgrade request (null for a plain request: 426 P08). */
export interface WebSocketUpgrade {
  accept(onOpen: (ws: WebSocket) => void): void;
}

const UPGRADE = Symbol('kiste.websocket-upgrade');
/** Largest message a client may send; SSH packets are far smaller (the tunnel splits nothing). */
const MAX_MESSAGE_BYTES = 1024 * 1024;
/** Guest bytes queued for a slow client before the guest side is paused. */
const SEND_HIGH_WATER = 1024 * 1024;

export function upgradeOf(req: IncomingMessage): WebSocketUpgrade | null {
  return (req as IncomingMessage & { [UPGRADE]?: WebSocketUpgrade })[UPGRADE] ?? null;
}

type RequestListener = (req: IncomingMessage, res: ServerResponse) => void;

/** Routes the server's upgrade requests through the app. */
/** Where an app takes upgrades of its own before kiste's WebSockets (the services' proxy: hosts of published services). */
export const SERVICE_UPGRADES = Symbol('kiste.serviceUpgrades');
export type ServiceUpgrades = { [SERVICE_UPGRADES]?: (req: IncomingMessage, socket: Duplex, head: Buffer) => boolean };

export function serveWebSockets(server: Server, app: RequestListener): { close(): void } {
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_MESSAGE_BYTES, perMessageDeflate: false });
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    if ((app as ServiceUpgrades)[SERVICE_UPGRADES]?.(req, socket, head)) return;
    const res = upgradeResponse(req, socket);
    if (!res) return;
    let accepted = false;
    if (isWebSocketHandshake(req)) {
      (req as IncomingMessage & { [UPGRADE]?: WebSocketUpgrade })[UPGRADE] = {
        accept(onOpen) {
          accepted = true;
          res.detachSocket(socket as Socket);
          if (!socket.writable) return socket.destroy();
          wss.handleUpgrade(req, socket, head, onOpen);
        },
      };
    }
    // An answer instead of an upgrade: the connection ends with it.
    res.on('finish', () => {
      if (!accepted) socket.end();
    });
    app(req, res);
  });
  return { close: () => wss.close() };
}

/** Close codes a tunnel ends with (4000–4999: private use). */
const CLOSE_CODES: Record<TunnelEnd, number> = { guest_closed: 1000, shutdown: 1001, idle: 4001, signed_out: 4003 };

/** Binary frames both ways carry the tunnel's bytes; backpressure holds the slower side. */
export function carryTunnel(ws: WebSocket, tunnel: SshTunnel): void {
  let drainWaiter: (() => void) | null = null;
  const peer: TunnelPeer = {
    send(chunk) {
      ws.send(chunk, { binary: true }, () => {
        if (ws.bufferedAmount < SEND_HIGH_WATER / 2) drainWaiter?.();
      });
      return ws.bufferedAmount < SEND_HIGH_WATER;
    },
    onDrain(resume) {
      drainWaiter = resume;
    },
    close(end, detail) {
      if (ws.readyState === ws.OPEN) ws.close(CLOSE_CODES[end], (detail ?? end).slice(0, 120));
      else ws.terminate();
    },
  };
  ws.on('message', (data: RawData, isBinary: boolean) => {
    if (!isBinary) {
      ws.close(1003, 'binary frames only');
      return;
    }
    // Stop reading the client until the guest took these bytes.
    ws.pause();
    tunnel.write(bufferOf(data), () => ws.resume());
  });
  ws.on('close', () => tunnel.close('guest_closed'));
  ws.on('error', () => tunnel.close('guest_closed'));
  tunnel.attach(peer);
}

/**
 * A terminal over a WebSocket: binary frames carry the terminal's bytes both ways; the client
 * sends text frames `{"type":"resize","cols":N,"rows":N}`; when the shell ends the service sends
 * `{"type":"exit","exit_code":N|null,"reason":"…"}` and closes (1000). Leaving (closing the socket)
 * keeps the shell for a reconnect with the same capability.
 */
export function carryTerminal(ws: WebSocket, session: TerminalSession): void {
  const peer: TerminalPeer = {
    output(chunk) {
      if (ws.readyState === ws.OPEN) ws.send(chunk, { binary: true });
    },
    end(exitCode, reason) {
      if (ws.readyState !== ws.OPEN) return;
      ws.send(JSON.stringify({ type: 'exit', exit_code: exitCode, reason }));
      ws.close(1000, reason.slice(0, 120));
    },
  };
  ws.on('message', (data: RawData, isBinary: boolean) => {
    const bytes = bufferOf(data);
    if (isBinary) {
      ws.pause();
      return session.input(bytes, () => ws.resume());
    }
    let message: { type?: unknown; cols?: unknown; rows?: unknown };
    try {
      message = JSON.parse(bytes.toString('utf8'));
    } catch {
      return ws.close(1003, 'text frames must be JSON control messages');
    }
    if (message.type === 'resize') {
      session.resize(Number(message.cols), Number(message.rows)).catch(() => ws.send(JSON.stringify({ type: 'error', message: 'cols and rows must be 1 to 1000' })));
    }
  });
  ws.on('close', () => session.detach(peer));
  ws.on('error', () => session.detach(peer));
  session.attach(peer).catch((error: Error) => peer.end(null, error.message));
}

/**
 * The recovery console: the machine's RFB stream as binary frames both ways (what noVNC speaks).
 * Backpressure holds the screen's side while the browser is slow; the console ends when either
 * side closes, or when its desktop session ends (`track` registers it).
 */
export function carryRecoveryConsole(ws: WebSocket, rfb: Duplex, track: (stream: DesktopStream) => () => void): void {
  const untrack = track({
    close(reason) {
      if (ws.readyState === ws.OPEN) ws.close(4003, reason.slice(0, 120));
      else ws.terminate();
      rfb.destroy();
    },
  });
  rfb.on('data', (chunk: Buffer) => {
    if (ws.readyState !== ws.OPEN) return;
    ws.send(chunk, { binary: true }, () => {
      if (ws.bufferedAmount < SEND_HIGH_WATER / 2 && rfb.isPaused()) rfb.resume();
    });
    if (ws.bufferedAmount >= SEND_HIGH_WATER) rfb.pause();
  });
  const end = (code: number, reason: string) => {
    untrack();
    rfb.destroy();
    if (ws.readyState === ws.OPEN) ws.close(code, reason);
  };
  rfb.on('close', () => end(1000, 'the screen closed (the machine stopped?)'));
  rfb.on('error', () => undefined);
  ws.on('message', (data: RawData, isBinary: boolean) => {
    if (!isBinary) return ws.close(1003, 'binary frames only');
    ws.pause();
    if (rfb.write(bufferOf(data))) ws.resume();
    else rfb.once('drain', () => ws.resume());
  });
  ws.on('close', () => end(1000, 'closed'));
  ws.on('error', () => end(1011, 'error'));
}
