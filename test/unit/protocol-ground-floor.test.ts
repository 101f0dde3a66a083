// src/protocol is the ground floor (src/protocol/README.md): the guest agent, the service, the CLI
// and the worker share it, so nothing in it imports from the rest of src. Every import, export-from,
// require and dynamic import of every file there is read with TypeScript's own scanner; a relative
// one that leaves src/protocol fails this test. agent.ts is bundled into the guest agent, so it
// imports nothing but Node's built-ins.
import { readdirSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, relative, resolve, sep } from 'node:path';
import ts from 'typescript';

const PROTOCOL = resolve(__dirname, '../../src/protocol');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return /\.(c|m)?(t|j)sx?$/.test(entry.name) ? [path] : [];
  });
}

/** Every module a file names: import/export from, import '…', import(…), require(…). */
function specifiers(text: string): string[] {
  return ts.preProcessFile(text, true, true).importedFiles.map((file) => file.fileName);
}

/** Specifiers of `file` that reach out of src/protocol, as "file: specifier". */
function leaving(file: string, text: string): string[] {
  return specifiers(text)
    .filter((specifier) => {
      if (!specifier.startsWith('.') && !specifier.startsWith('/')) return false; // npm package or built-in
      const target = resolve(dirname(file), specifier);
      return target !== PROTOCOL && !target.startsWith(PROTOCOL + sep);
    })
    .map((specifier) => `${relative(PROTOCOL, file)}: ${specifier}`);
}

const isBuiltin = (specifier: string) => specifier.startsWith('node:') || builtinModules.includes(specifier);

describe('src/protocol is the ground floor', () => {
  const files = sourceFiles(PROTOCOL);

  it('holds the protocol files', () => {
    const names = files.map((file) => relative(PROTOCOL, file));
    expect(names).toEqual(expect.arrayContaining(['agent.ts', 'agent-shapes.ts', 'peer-input.ts']));
  });

  it('imports nothing from outside src/protocol', () => {
    expect(files.flatMap((file) => leaving(file, readFileSync(file, 'utf8')))).toEqual([]);
  });

  it('agent.ts, which the guest agent bundles, imports nothing but Node built-ins', () => {
    const named = specifiers(readFileSync(join(PROTOCOL, 'agent.ts'), 'utf8'));
    expect(named.filter((specifier) => !isBuiltin(specifier))).toEqual([]);
  });

  it('the check sees every way out', () => {
    const file = join(PROTOCOL, 'example.ts');
    const text = [
      "import { a } from './agent';",
      "import type { B } from '../compute/agent-client';",
      "export { c } from '../../test/support/thing';",
      "import '../server';",
      "const d = require('../config');",
      "const e = import('../domain/alerts');",
      "import { Ajv } from 'ajv';",
      "import { join } from 'node:path';",
      '// import { f } from "../commented-out";',
    ].join('\n');
    expect(leaving(file, text)).toEqual([
      'example.ts: ../compute/agent-client',
      'example.ts: ../../test/support/thing',
      'example.ts: ../server',
      'example.ts: ../config',
      'example.ts: ../domain/alerts',
    ]);
  });
});
