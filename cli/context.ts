// Where the CLI talks to and as whom: --url/--token, then KISTE_URL/KISTE_TOKEN, then the config file
// ($KISTE_CONFIG_DIR, else $XDG_CONFIG_HOME/kiste, else ~/.config/kiste; written 0600 by `kiste login`).
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

export interface CliContext {
  url: string;
  token: string | null;
  configDir: string;
  json: boolean;
}

interface ConfigFile {
  url?: string;
  token?: string;
}

export const DEFAULT_URL = 'http://127.0.0.1:8080';

export function configDir(): string {
  if (process.env.KISTE_CONFIG_DIR) return process.env.KISTE_CONFIG_DIR;
  return join(process.env.XDG_CONFIG_HOME || join(homedir(), '.config'), 'kiste');
}

export function readConfig(dir = configDir()): ConfigFile {
  const file = join(dir, 'config.json');
  if (!existsSync(file)) return {};
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as ConfigFile;
  } catch {
    return {};
  }
}

/** The token is a secret: the directory is 0700 and the file 0600, whatever the umask. */
export function writeConfig(config: ConfigFile, dir = configDir()): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const file = join(dir, 'config.json');
  writeFileSync(file, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
}

export function resolveContext(options: { url?: string; token?: string; json?: boolean }): CliContext {
  const dir = configDir();
  const file = readConfig(dir);
  // KISTE_DEFAULT_URL: set by the installed `kiste` wrapper to the service it was installed from.
  const url = (options.url ?? process.env.KISTE_URL ?? file.url ?? process.env.KISTE_DEFAULT_URL ?? DEFAULT_URL).replace(/\/+$/, '');
  const token = options.token ?? process.env.KISTE_TOKEN ?? file.token ?? null;
  return { url, token, configDir: dir, json: Boolean(options.json) };
}
