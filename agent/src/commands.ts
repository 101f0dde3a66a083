// Runs the system tools the agent relies on (hostname, ssh-keygen, systemctl, date, sync). They are
// found through PATH, which lets tests substitute harmless stand-ins.
import { execFile } from 'node:child_process';
import { AgentError } from './errors';

export interface CommandOutput {
  stdout: string;
  stderr: string;
}

export function runCommand(file: string, args: string[], env: Record<string, string>, timeoutMs = 60_000): Promise<CommandOutput> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { env, timeout: timeoutMs, maxBuffer: 1024 * 1024 }, (error, stdout, stderr) => {
      if (error) {
        const detail = String(stderr).trim() || error.message;
        reject(new AgentError('command_failed', `${[file, ...args].join(' ')} failed: ${detail.slice(0, 2000)}`));
      } else {
        resolve({ stdout: String(stdout), stderr: String(stderr) });
      }
    });
  });
}
