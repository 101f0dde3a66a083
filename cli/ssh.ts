// `kiste ssh NAME [-- COMMAND…]`: the system's OpenSSH, with `kiste tunnel %h` as ProxyCommand and a
// known_hosts file of the CLI's own filled from the API (StrictHostKeyChecking=yes: no prompt, no
// trust on first use). `kiste ssh-config` prints the same settings for ~/.ssh/config.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { shellWord } from '../src/shell-quote';
import { apiFor, ok, requireToken } from './api';
import type { CliContext } from './context';

export function knownHostsFile(ctx: CliContext): string {
  return join(ctx.configDir, 'known_hosts');
}

/** How to run this CLI again (ProxyCommand), the same way it runs now (also from source with tsx). */
export function selfCommand(): string {
  return [process.execPath, ...process.execArgv, process.argv[1]!].map(shellWord).join(' ');
}

/** Puts the instance's current host key into the CLI's known_hosts (replacing an older line for it). */
export async function pinHostKey(ctx: CliContext, name: string): Promise<string> {
  const key = ok(await apiFor(ctx).GET('/v1/instances/{name}/ssh-host-key', { params: { path: { name } } }));
  const file = knownHostsFile(ctx);
  mkdirSync(ctx.configDir, { recursive: true, mode: 0o700 });
  const others = existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter((line) => line && !line.startsWith(`${key.alias} `)) : [];
  writeFileSync(file, [...others, key.known_hosts_line].join('\n') + '\n', { mode: 0o600 });
  return key.alias;
}

export function sshOptions(ctx: CliContext): string[] {
  return ['-o', `ProxyCommand=${selfCommand()} tunnel %h`, '-o', `UserKnownHostsFile=${knownHostsFile(ctx)}`, '-o', 'StrictHostKeyChecking=yes'];
}

export async function runSsh(ctx: CliContext, name: string, options: { identity?: string; option?: string[]; user: string }, command: string[]): Promise<number> {
  requireToken(ctx);
  const alias = await pinHostKey(ctx, name);
  const args = [...sshOptions(ctx), ...(options.identity ? ['-i', options.identity] : []), ...(options.option ?? []).flatMap((o) => ['-o', o]), `${options.user}@${alias}`, ...command];
  // The ProxyCommand (this CLI) finds the service and the credential through the environment.
  const env = { ...process.env, KISTE_URL: ctx.url, KISTE_TOKEN: ctx.token ?? '', KISTE_CONFIG_DIR: ctx.configDir };
  return new Promise((resolve, reject) => {
    const child = spawn('ssh', args, { stdio: 'inherit', env });
    child.on('error', (error) => reject(error));
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
}

export function sshConfigBlock(ctx: CliContext): string {
  return [
    'Host *.kiste',
    '  User root',
    `  ProxyCommand ${selfCommand()} tunnel %h`,
    `  UserKnownHostsFile ${knownHostsFile(ctx)}`,
    '  StrictHostKeyChecking yes',
    '',
  ].join('\n');
}
