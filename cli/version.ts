// The CLI's version: the package's. A bundle has it built in (cli/build.ts defines it); from the
// sources, package.json is found by walking up (it sits higher in a compiled dist/ tree).
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

declare const KISTE_CLI_VERSION: string | undefined;

export const CLI_VERSION: string = typeof KISTE_CLI_VERSION === 'string' ? KISTE_CLI_VERSION : packageVersion();

export function packageVersion(from = __dirname): string {
  for (let dir = from; ; dir = dirname(dir)) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
    if (dirname(dir) === dir) return '0.0.0';
  }
}
