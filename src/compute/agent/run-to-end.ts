// run(): a command run to its end with its output collected — the same rule wherever the command
// runs (AgentClient in this process, RemoteGuestAgent through a worker), so it is written once.
import type { ExecExitEvent, ExecStartParams } from '../../protocol/agent';
import { AgentCallError } from './errors';
import type { ExecStream } from './exec-stream';
import type { RequestOptions } from './options';

/** The most output run() collects (it is for small outputs): a call may ask for less. */
export const RUN_OUTPUT_LIMIT = 4 * 1024 * 1024;
/** run()'s deadline when the call names neither one nor a timeout for the command. */
export const RUN_DEADLINE_MS = 60_000;

export type RunResult = ExecExitEvent & { stdout: Buffer; stderr: Buffer };

/**
 * Runs a command to its end and collects its output, at most RUN_OUTPUT_LIMIT bytes (or the call's
 * output_limit_bytes). options.timeoutMs is the deadline of the whole run; without it, the
 * command's timeout plus exitGraceMs, or RUN_DEADLINE_MS.
 */
export async function runToEnd(
  exec: (params: ExecStartParams, options: RequestOptions) => Promise<ExecStream>,
  params: ExecStartParams,
  options: RequestOptions,
  exitGraceMs: number,
): Promise<RunResult> {
  const limit = Math.min(params.output_limit_bytes ?? RUN_OUTPUT_LIMIT, RUN_OUTPUT_LIMIT);
  const deadlineMs = options.timeoutMs ?? (params.timeout_ms ? params.timeout_ms + exitGraceMs : RUN_DEADLINE_MS);
  const deadline = Date.now() + deadlineMs;
  const handle = await exec({ ...params, output_limit_bytes: limit }, { timeoutMs: deadlineMs });
  const timer = setTimeout(() => handle.giveUp(new AgentCallError('timeout', `${params.argv[0]}: did not finish within ${deadlineMs} ms`)), deadline - Date.now());
  try {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let bytes = 0;
    for await (const chunk of handle) {
      bytes += chunk.data.length;
      // The agent cuts output at the limit; more is an agent that ignores it.
      if (bytes > limit) handle.giveUp(new AgentCallError('protocol', `${params.argv[0]}: output beyond its limit of ${limit} bytes`));
      else (chunk.stream === 'stdout' ? out : err).push(chunk.data);
    }
    const exit = await handle.exit;
    return { ...exit, stdout: Buffer.concat(out), stderr: Buffer.concat(err) };
  } finally {
    clearTimeout(timer);
  }
}
