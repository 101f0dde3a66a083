// `kiste exec NAME -- CMD…`: streams the command's stdout and stderr as they come and exits with its
// exit code (--json: the NDJSON lines as the service sends them).
import { apiFor, CliError, errorFromEnvelope } from './api';
import type { CliContext } from './context';

export async function runExec(ctx: CliContext, name: string, argv: string[], options: { timeoutMs?: number; cwd?: string }): Promise<number> {
  const { response, error } = await apiFor(ctx).POST('/v1/instances/{name}/exec', {
    params: { path: { name } },
    body: { argv, ...(options.cwd ? { cwd: options.cwd } : {}), ...(options.timeoutMs ? { timeout_ms: options.timeoutMs } : {}) },
    parseAs: 'stream',
  });
  // openapi-fetch reads an error answer's body itself (as JSON): the envelope is in `error`.
  if (!response.ok || !response.body) throw errorFromEnvelope(error, response);
  let exitCode: number | null = null;
  let pending = '';
  const decoder = new TextDecoder();
  for await (const part of response.body as unknown as AsyncIterable<Uint8Array>) {
    pending += decoder.decode(part, { stream: true });
    let newline: number;
    while ((newline = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, newline);
      pending = pending.slice(newline + 1);
      if (!line) continue;
      if (ctx.json) process.stdout.write(`${line}\n`);
      const event = JSON.parse(line) as { type: string; stream?: string; data_base64?: string; exit_code?: number; message?: string };
      if (event.type === 'output' && !ctx.json) {
        const bytes = Buffer.from(event.data_base64 ?? '', 'base64');
        await write(event.stream === 'stderr' ? process.stderr : process.stdout, bytes);
      } else if (event.type === 'completed') {
        exitCode = event.exit_code ?? 0;
      } else if (event.type === 'failed') {
        throw new CliError(`the command could not run: ${event.message ?? 'unknown failure'}`);
      }
    }
  }
  if (exitCode === null) throw new CliError('the stream ended before the command completed', { hint: 'See GET /v1/instances/{name}/commands for its record.' });
  return exitCode;
}

function write(stream: NodeJS.WriteStream, bytes: Buffer): Promise<void> {
  return new Promise((resolve) => (stream.write(bytes) ? resolve() : stream.once('drain', () => resolve())));
}
