// Running the kiste CLI in tests as a user would: a child process from the sources (tsx as a
// loader), with an environment free of the test runner's own KISTE_* settings.
import { execFile, spawn } from 'node:child_process';
import { join } from 'node:path';
import { shellQuote } from '../../src/shell-quote';

export const KISTE_CLI = [process.execPath, '--import', 'tsx', join(__dirname, '../../cli/kiste.ts')];

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** The process environment without KISTE_* variables, plus `extra`. */
export function cliEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return { ...Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('KISTE_'))), ...extra };
}

/** Runs any program to its end (the CLI, ssh, an installed launcher). */
export function runProgram(file: string, args: string[], env: NodeJS.ProcessEnv, timeoutMs = 120_000): Promise<CliRun> {
  return new Promise((resolve) => {
    execFile(file, args, { env, timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) =>
      resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stdout: String(stdout), stderr: String(stderr) }),
    );
  });
}

export function runKiste(args: string[], env: NodeJS.ProcessEnv): Promise<CliRun> {
  return runProgram(KISTE_CLI[0]!, [...KISTE_CLI.slice(1), ...args], env);
}

/** The CLI as a long-running child (login waiting for the browser, events --follow). */
export function spawnKiste(args: string[], env: NodeJS.ProcessEnv) {
  return spawn(KISTE_CLI[0]!, [...KISTE_CLI.slice(1), ...args], { env });
}

/**
 * The CLI on a pseudo-terminal (script(1)) `columns` wide, as a user at a terminal runs it: spinners
 * are drawn, stdout and stderr arrive together on the child's stdout, and what is written to its
 * stdin is typed (\x03 is Ctrl-C).
 */
export function spawnKisteOnTerminal(args: string[], env: NodeJS.ProcessEnv, columns = 160) {
  const command = [...KISTE_CLI, ...args].map(shellQuote).join(' ');
  return spawn('script', ['--quiet', '--return', '--command', `stty cols ${columns}; exec ${command}`, '/dev/null'], { env });
}
