// Builds the CLI as one file for any Node >= 18 into dist/downloads/kiste.js: what /downloads/kiste.js
// serves and /install.sh installs. Run by `npm run build` (and before the tests); esbuild takes well
// under a second.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { build } from 'esbuild';
import { packageRoot } from '../src/db/migrate';
import { packageVersion } from './version';

export async function buildCliBundle(outFile: string): Promise<number> {
  const result = await build({
    entryPoints: [join(packageRoot(), 'cli', 'kiste.ts')],
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
  const contents = result.outputFiles[0]!.contents;
  mkdirSync(join(outFile, '..'), { recursive: true });
  writeFileSync(outFile, contents, { mode: 0o644 });
  return contents.byteLength;
}

if (require.main === module) {
  const outFile = join(packageRoot(), 'dist', 'downloads', 'kiste.js');
  buildCliBundle(outFile).then(
    (bytes) => console.log(`CLI bundle: ${outFile} (${(bytes / 1024).toFixed(0)} KiB)`),
    (error: unknown) => {
      console.error(`CLI bundle failed: ${error instanceof Error ? error.message : String(error)}`);
      process.exit(1);
    },
  );
}
