// `kiste tunnel HOST`: OpenSSH's ProxyCommand. Copies stdin/stdout to the instance's SSH tunnel
// WebSocket (binary frames), each side paused while the other is full.
import WebSocket from 'ws';
import { CliError, errorFromEnvelope, requireToken } from './api';
import type { CliContext } from './context';

/** `web-one.kiste` or `web-one` → `web-one`. */
export function instanceOfHost(host: string): string {
  return host.replace(/\.kiste$/, '');
}

export function tunnelUrl(ctx: CliContext, name: string): string {
  const url = new URL(`/v1/instances/${encodeURIComponent(name)}/ssh-tunnel`, ctx.url);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  return url.toString();
}

export function runTunnel(ctx: CliContext, host: string, input: NodeJS.ReadableStream = process.stdin, output: NodeJS.WritableStream = process.stdout): Promise<void> {
  const token = requireToken(ctx);
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(tunnelUrl(ctx, instanceOfHost(host)), { headers: { authorization: `Bearer ${token}` }, perMessageDeflate: false });
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (chunk) => (body += chunk));
      res.on('end', () => {
        let parsed: unknown = null;
        try {
          parsed = JSON.parse(body);
        } catch {
          // not the envelope: the status is all there is to say
        }
        const headers = { get: (name: string) => (res.headers[name] as string | undefined) ?? null };
        reject(errorFromEnvelope(parsed, { status: res.statusCode ?? 0, headers }, 255));
      });
    });
    ws.on('open', () => {
      input.on('data', (chunk: Buffer) => {
        ws.send(chunk, { binary: true }, () => {
          if (ws.bufferedAmount < 512 * 1024) input.resume();
        });
        if (ws.bufferedAmount >= 1024 * 1024) input.pause();
      });
      input.on('end', () => ws.close(1000));
    });
    ws.on('message', (data: Buffer) => {
      if (!output.write(data)) {
        ws.pause();
        output.once('drain', () => ws.resume());
      }
    });
    ws.on('close', (code, reason) => {
      if (code === 1000 || code === 1005) resolve();
      else reject(new CliError(`tunnel closed: ${reason.toString() || `code ${code}`}`, { exitCode: 255 }));
    });
    ws.on('error', (error) => reject(new CliError(`tunnel failed: ${error.message}`, { exitCode: 255 })));
  });
}
