// The CLI as one file for any Node >= 18 (what /downloads/kiste.js serves and /install.sh installs).
// Built in memory on first request and kept: esbuild takes well under a second.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { build } from 'esbuild';
import { packageVersion } from './version';

export async function buildCliBundle(): Promise<Buffer> {
  // From the sources (tsx) the entry is kiste.ts; in a compiled dist/ tree it is kiste.js.
  const entry = join(__dirname, existsSync(join(__dirname, 'kiste.ts')) ? 'kiste.ts' : 'kiste.js');
  const result = await build({
    entryPoints: [entry],
    bundle: true,
    platform: 'node',
    target: 'node18',
    format: 'cjs',
    write: false,
    minify: false,
    legalComments: 'none',
    banner: { js: '#!/usr/bin/env node' },
    define: { KISTE_CLI_VERSION: JSON.stringify(packageVersion()) },
    // ws's optional native speed-ups: it works without them.
    external: ['bufferutil', 'utf-8-validate'],
    logLevel: 'silent',
  });
  return Buffer.from(result.outputFiles[0]!.contents);
}

let cached: Promise<Buffer> | null = null;

/** The bundle, built once per process. */
export function cliBundle(): Promise<Buffer> {
  cached ??= buildCliBundle().catch((error: unknown) => {
    cached = null; // let a later request try again
    throw error;
  });
  return cached;
}
