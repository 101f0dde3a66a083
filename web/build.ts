// Builds the web console (web/src, Preact) with Vite into dist/console: index.html plus content-hashed
// files in assets/. Prints the first load (what index.html pulls in before any page runs: entry
// script, its static imports, style sheets), gzipped, and fails when it is over the budget. The
// terminal (xterm.js) is a separate chunk loaded on demand and not part of the first load.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { build } from 'vite';
import { packageRoot } from '../src/db/migrate';

export const FIRST_LOAD_BUDGET_KIB = 200;

export async function buildConsole(outDir: string): Promise<void> {
  await build({
    root: join(packageRoot(), 'web'),
    base: '/',
    logLevel: 'warn',
    configFile: false,
    oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
    build: {
      outDir,
      emptyOutDir: true,
      target: 'es2022',
      // Every file is served from /assets/ with a content hash; nothing is inlined into the page, so
      // the CSP needs no inline script (small assets would otherwise become data: URLs).
      assetsInlineLimit: 0,
      modulePreload: { polyfill: false },
      sourcemap: false,
      reportCompressedSize: false,
    },
  });
}

/** The files index.html loads up front, and their gzipped size. */
export function firstLoad(outDir: string): { files: { name: string; gzipBytes: number }[]; gzipBytes: number } {
  const html = readFileSync(join(outDir, 'index.html'), 'utf8');
  const names = [...html.matchAll(/(?:src|href)="\/(assets\/[^"]+\.(?:js|css))"/g)].map((match) => match[1]!);
  const files = [...new Set(names)].map((name) => ({ name, gzipBytes: gzipSync(readFileSync(join(outDir, name))).byteLength }));
  return { files, gzipBytes: files.reduce((sum, file) => sum + file.gzipBytes, 0) };
}

if (require.main === module) {
  const outDir = join(packageRoot(), 'dist', 'console');
  const started = Date.now();
  buildConsole(outDir)
    .then(() => {
      const load = firstLoad(outDir);
      for (const file of load.files) console.log(`  ${file.name}  ${(file.gzipBytes / 1024).toFixed(1)} KiB gzip`);
      const kib = load.gzipBytes / 1024;
      console.log(`console: ${outDir} in ${((Date.now() - started) / 1000).toFixed(1)} s; first load ${kib.toFixed(1)} KiB gzip (budget ${FIRST_LOAD_BUDGET_KIB} KiB)`);
      if (kib > FIRST_LOAD_BUDGET_KIB) {
        console.error(`console: the first load is over its budget of ${FIRST_LOAD_BUDGET_KIB} KiB gzip`);
        process.exit(1);
      }
    })
    .catch((error: unknown) => {
      console.error(`console build failed: ${error instanceof Error ? error.message : String(error)}`);
      process.exit(1);
    });
}
