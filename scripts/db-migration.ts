// Writes and checks the SQL migrations in prisma/migrations/<provider>/, offline.
//   npx tsx scripts/db-migration.ts create <name>   new migration for every provider whose schema changed
//   npx tsx scripts/db-migration.ts check           exit 1 when prisma/schema.prisma has changes no migration covers
// Each provider folder keeps schema.snapshot.prisma, the schema as of its latest migration; a new
// migration is the diff snapshot -> current schema, computed by Prisma's schema engine (WebAssembly
// build, no engine binary and no database needed). src/db/migrate.ts applies the files at start-up.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import {
  bindMigrationAwareSqlAdapterFactory,
  ColumnTypeEnum,
  mockAdapter,
  mockMigrationAwareAdapterFactory,
} from '@prisma/driver-adapter-utils';
import type { SqlMigrationAwareDriverAdapterFactory, SqlQuery } from '@prisma/driver-adapter-utils';
import type { DiffTarget, SchemaEngine } from '@prisma/schema-engine-wasm';
import { schemaFor, type SchemaProvider } from '../codegen/prisma';

const providers: readonly SchemaProvider[] = ['sqlite', 'postgresql'];
const migrationsRoot = path.resolve(__dirname, '..', 'prisma', 'migrations');
const providerDir = (provider: SchemaProvider) => path.join(migrationsRoot, provider);
const snapshotPath = (provider: SchemaProvider) => path.join(providerDir(provider), 'schema.snapshot.prisma');

let engineModule: typeof import('@prisma/schema-engine-wasm') | undefined;

/** The bit of the WebAssembly API we use (our lib setting has no WebAssembly declarations). */
declare const WebAssembly: {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object, imports: Record<string, object>) => { exports: Record<string, unknown> };
};

/**
 * The package's entry point does `import * as wasm from "./schema_engine_bg.wasm"`, which Node 20
 * only allows with --experimental-wasm-modules. So we take the JS glue (schema_engine_bg.js, plain
 * ESM: require()-able on Node >= 20.19) and instantiate the .wasm ourselves, as the entry point would.
 */
function schemaEngineModule(): typeof import('@prisma/schema-engine-wasm') {
  if (engineModule) return engineModule;
  const glue = require('@prisma/schema-engine-wasm/schema_engine_bg') as typeof import('@prisma/schema-engine-wasm') & {
    __wbg_set_wasm(exports: Record<string, unknown>): void;
  };
  const wasmFile = require.resolve('@prisma/schema-engine-wasm/schema_engine_bg').replace(/\.js$/, '.wasm');
  const instance = new WebAssembly.Instance(new WebAssembly.Module(readFileSync(wasmFile)), {
    './schema_engine_bg.js': glue, // the .wasm imports its JS helpers from this module name
  });
  glue.__wbg_set_wasm(instance.exports);
  (instance.exports.__wbindgen_start as () => void)();
  return (engineModule = glue);
}

/**
 * Diffing two schemas needs no database, but the engine still opens a connection when it starts.
 * For SQLite Prisma's mock adapter suffices. For PostgreSQL the engine first asks for the server
 * version (to tell PostgreSQL from CockroachDB); we answer that one query and refuse everything else,
 * so a change in the engine shows up as a clear error rather than a silent wrong diff.
 */
function offlineAdapterFactory(provider: SchemaProvider): SqlMigrationAwareDriverAdapterFactory {
  if (provider === 'sqlite') return mockMigrationAwareAdapterFactory('sqlite');
  const connect = async () => ({
    ...mockAdapter('postgres'),
    queryRaw: async (query: SqlQuery) => {
      if (!query.sql.includes('server_version_num')) {
        throw new Error(`offline schema diff: unexpected query from the schema engine: ${query.sql}`);
      }
      return {
        columnNames: ['exists', 'version', 'numeric_version'],
        columnTypes: [ColumnTypeEnum.Boolean, ColumnTypeEnum.Text, ColumnTypeEnum.Int32],
        rows: [[true, 'PostgreSQL 15.0', 150000]], // schema "public" exists; a plain PostgreSQL 15
      };
    },
  });
  return { provider: 'postgres', adapterName: 'kiste-offline-diff', connect, connectToShadowDb: connect };
}

/** SQL that turns `from` (undefined: empty database) into `to`; undefined when they are equivalent. */
async function diffSql(provider: SchemaProvider, from: string | undefined, to: string): Promise<string | undefined> {
  const { SchemaEngine: Engine } = schemaEngineModule();
  const target = (content: string): DiffTarget => ({ tag: 'schemaDatamodel', files: [{ path: 'schema.prisma', content }] });
  const adapter = bindMigrationAwareSqlAdapterFactory(offlineAdapterFactory(provider));
  let engine: SchemaEngine | undefined;
  try {
    engine = await Engine.new({ datamodels: [['schema.prisma', to]] }, () => {} /* engine log: not needed */, adapter);
    const result = await engine.diff({
      from: from === undefined ? { tag: 'empty' } : target(from),
      to: target(to),
      script: true,
      exitCode: true, // exitCode 2 = the schemas differ
      filters: { externalTables: [], externalEnums: [] },
    });
    return result.exitCode === 2 ? (result.stdout ?? '') : undefined;
  } catch (error) {
    // Errors thrown by the adapter reach us only as "External error id#N"; show the original.
    const id = /External error id#(\d+)/.exec(error instanceof Error ? error.message : '')?.[1];
    const original = id === undefined ? undefined : adapter.errorRegistry.consumeError(Number(id))?.error;
    throw original ?? error;
  } finally {
    engine?.free();
  }
}

function readSnapshot(provider: SchemaProvider): string | undefined {
  return existsSync(snapshotPath(provider)) ? readFileSync(snapshotPath(provider), 'utf8') : undefined;
}

function timestamp(date = new Date()): string {
  return date.toISOString().replace(/[-:T]/g, '').slice(0, 14); // YYYYMMDDHHMMSS, UTC
}

async function create(name: string): Promise<void> {
  if (!/^[a-z0-9][a-z0-9_]*$/.test(name)) throw new Error(`migration name must match [a-z0-9_]+, got '${name}'`);
  const folder = `${timestamp()}_${name}`;
  let created = 0;
  for (const provider of providers) {
    const current = schemaFor(provider);
    const sql = await diffSql(provider, readSnapshot(provider), current);
    if (sql === undefined) {
      console.log(`${provider}: nothing to do, the schema matches the latest migration`);
      continue;
    }
    const dir = path.join(providerDir(provider), folder);
    if (existsSync(dir)) throw new Error(`${dir} already exists`);
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, 'migration.sql'), sql);
    writeFileSync(snapshotPath(provider), current);
    console.log(`${provider}: wrote ${path.relative(process.cwd(), path.join(dir, 'migration.sql'))}`);
    created++;
  }
  if (created === 0) console.log('Nothing to do.');
}

async function check(): Promise<boolean> {
  const behind: SchemaProvider[] = [];
  for (const provider of providers) {
    if ((await diffSql(provider, readSnapshot(provider), schemaFor(provider))) !== undefined) behind.push(provider);
  }
  if (behind.length === 0) {
    console.log('Migrations are up to date with prisma/schema.prisma.');
    return true;
  }
  console.error(
    `A migration is missing (${behind.join(', ')}): prisma/schema.prisma differs from ` +
      `prisma/migrations/<provider>/schema.snapshot.prisma.\n` +
      `Run: npx tsx scripts/db-migration.ts create <name>`,
  );
  return false;
}

async function main(argv: string[]): Promise<number> {
  const [command, name] = argv;
  if (command === 'create' && name) {
    await create(name);
    return 0;
  }
  if (command === 'check') return (await check()) ? 0 : 1;
  console.error('usage: db-migration.ts create <name> | check');
  return 2;
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error: unknown) => {
      console.error(error instanceof Error ? error.message : error);
      process.exit(1);
    },
  );
}
