// Generates the two Prisma clients (SQLite and PostgreSQL) from the one prisma/schema.prisma.
// Run: npx tsx codegen/prisma.ts   (also part of `npm run codegen`).
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export type SchemaProvider = 'sqlite' | 'postgresql';

const rootDir = path.resolve(__dirname, '..');
export const schemaPath = path.join(rootDir, 'prisma', 'schema.prisma');
/** Scratch folder for the PostgreSQL variant of the schema; removed after each run, never committed. */
const scratchDir = path.join(rootDir, 'prisma', '.generated');

/**
 * The schema text for one provider. The checked-in schema is the SQLite one; the PostgreSQL variant
 * swaps the datasource provider and the client output folder. Fails loudly if the schema no longer
 * has the exact lines we swap, instead of silently generating a second SQLite client.
 * `outputRelativeTo` is the folder the returned schema will live in (Prisma resolves output from it).
 */
export function schemaFor(provider: SchemaProvider, outputRelativeTo = path.dirname(schemaPath)): string {
  const text = readFileSync(schemaPath, 'utf8');
  const providerLine = /^(\s*provider\s*=\s*)"sqlite"/m;
  const outputLine = /^(\s*output\s*=\s*)"[^"]*"/m;
  if (!providerLine.test(text) || !outputLine.test(text)) {
    throw new Error(`${schemaPath}: expected 'provider = "sqlite"' in datasource and an 'output = "..."' in generator`);
  }
  const output = path.relative(outputRelativeTo, path.join(rootDir, 'src', 'generated', 'prisma', clientFolder(provider)));
  return text
    .replace(providerLine, `$1"${provider}"`)
    // Forward slashes keep the generated files identical on every OS (Prisma inlines the schema).
    .replace(outputLine, `$1"${output.split(path.sep).join('/')}"`);
}

function clientFolder(provider: SchemaProvider): string {
  return provider === 'sqlite' ? 'sqlite' : 'postgres';
}

function prismaGenerate(schemaFile: string): void {
  const prismaCli = require.resolve('prisma/build/index.js');
  const result = spawnSync(process.execPath, [prismaCli, 'generate', '--schema', schemaFile], {
    cwd: rootDir,
    stdio: 'inherit',
    env: {
      ...process.env,
      // `prisma generate` wants the schema engine binary (downloaded from the internet) although the
      // prisma-client generator never runs it: any existing file stops the download. The schema file
      // itself is used so that, should Prisma ever execute it, the run fails instead of doing something.
      PRISMA_SCHEMA_ENGINE_BINARY: schemaFile,
      PRISMA_HIDE_UPDATE_MESSAGE: '1',
      CHECKPOINT_DISABLE: '1', // no telemetry / update check over the network
    },
  });
  if (result.status !== 0) throw new Error(`prisma generate --schema ${schemaFile} failed (exit ${result.status})`);
}

export async function generatePrismaClients(): Promise<void> {
  for (const provider of ['sqlite', 'postgresql'] as const) {
    // Start from an empty folder so files of removed models do not linger (determinism).
    rmSync(path.join(rootDir, 'src', 'generated', 'prisma', clientFolder(provider)), { recursive: true, force: true });
  }
  prismaGenerate(schemaPath);
  mkdirSync(scratchDir, { recursive: true });
  try {
    const postgresSchema = path.join(scratchDir, 'schema.postgresql.prisma');
    writeFileSync(postgresSchema, schemaFor('postgresql', scratchDir));
    prismaGenerate(postgresSchema);
  } finally {
    rmSync(scratchDir, { recursive: true, force: true });
  }
}

if (require.main === module) {
  generatePrismaClients().catch((error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exit(1);
  });
}
