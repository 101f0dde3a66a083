// Opens kiste's database: SQLite (embedded default) or PostgreSQL, migrated before it is handed out.
import { chmodSync, existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PrismaBetterSqlite3 } from '@prisma/adapter-better-sqlite3';
import { PrismaPg } from '@prisma/adapter-pg';
import { PrismaClient as PostgresPrismaClient } from '../generated/prisma/postgres/client';
import { PrismaClient as SqlitePrismaClient } from '../generated/prisma/sqlite/client';
import { CommitSignal, withCommitSignal } from './commit-signal';
import { migrateDatabase, SQLITE_BUSY_TIMEOUT_MS, type MigrationTarget } from './migrate';
import { CREDENTIALS_CHANNEL, CredentialChanges } from './credential-changes';
import { PostgresListener } from './postgres-listener';

/** The client type every store uses, whatever the provider (both clients have the same models). */
export type Db = SqlitePrismaClient;

export interface Database {
  prisma: Db;
  provider: 'sqlite' | 'postgresql';
  /** Announces committed event appends per account (from any process on PostgreSQL). */
  commits: CommitSignal;
  /** Accounts whose credentials ended or changed, announced to every process (on PostgreSQL). */
  credentialChanges: CredentialChanges;
  close(): Promise<void>;
}

export interface OpenDatabaseOptions {
  /** undefined or file:… = SQLite; postgres://… or postgresql://… = PostgreSQL. */
  url?: string;
  /** Holds kiste.db when url is undefined. */
  dataDir: string;
}

/** Where the database lives, from the configured URL. */
export function databaseTarget(opts: OpenDatabaseOptions): MigrationTarget {
  const { url, dataDir } = opts;
  if (url === undefined || url === '') return { provider: 'sqlite', file: path.resolve(dataDir, 'kiste.db') };
  if (url.startsWith('file:')) {
    // file:///abs/path is a real URL; file:./rel and file:/abs are Prisma-style paths (relative to cwd).
    const file = url.startsWith('file://') ? fileURLToPath(url) : url.slice('file:'.length);
    if (file === '') throw new Error('database URL file: names no file');
    return { provider: 'sqlite', file: path.resolve(file) };
  }
  if (/^postgres(ql)?:\/\//.test(url)) return { provider: 'postgresql', url };
  throw new Error(`unsupported database URL scheme '${url.split(':')[0]}:' (use file:, postgres:// or postgresql://)`);
}

/**
 * The database is readable by nobody but the service: machines' jail users may pass through the
 * data folder (src/compute/jail), so its mode, not the folder's, must keep them out. SQLite gives
 * its -wal and -shm files the database's mode.
 */
function keepPrivate(file: string): void {
  for (const part of [file, `${file}-wal`, `${file}-shm`]) {
    if (existsSync(part)) chmodSync(part, 0o600);
  }
}

export async function openDatabase(opts: OpenDatabaseOptions): Promise<Database> {
  const target = databaseTarget(opts);
  if (target.provider === 'sqlite') mkdirSync(path.dirname(target.file), { recursive: true });
  await migrateDatabase(target); // also switches a SQLite file to WAL (a persistent setting)

  if (target.provider === 'sqlite') {
    keepPrivate(target.file);
    const prisma = new SqlitePrismaClient({
      // `timeout` is better-sqlite3's busy timeout: wait for a concurrent writer instead of failing.
      adapter: new PrismaBetterSqlite3({ url: target.file, timeout: SQLITE_BUSY_TIMEOUT_MS }),
    });
    // better-sqlite3 is built with foreign keys on by default; say so explicitly on our connection
    // (the adapter keeps one connection), so cascades never depend on how the addon was compiled.
    await prisma.$executeRawUnsafe('PRAGMA foreign_keys = ON');
    const commits = new CommitSignal();
    const credentialChanges = new CredentialChanges(null);
    return { prisma: withCommitSignal(prisma, 'sqlite', commits), provider: 'sqlite', commits, credentialChanges, close: () => prisma.$disconnect() };
  }

  // The PostgreSQL client is generated from the same models, so its model API is the SQLite one's
  // plus PostgreSQL-only extras (e.g. `mode: 'insensitive'`), which kiste does not use. TypeScript
  // still sees two unrelated class types; this is the one place we treat it as the common type.
  const prisma = new PostgresPrismaClient({ adapter: new PrismaPg({ connectionString: target.url }) }) as unknown as Db;
  const commits = new CommitSignal();
  const credentialChanges = new CredentialChanges((accountId) => prisma.$executeRaw`SELECT pg_notify(${CREDENTIALS_CHANNEL}, ${accountId})`);
  const listener = new PostgresListener(target.url, commits, credentialChanges);
  await listener.start();
  return {
    prisma: withCommitSignal(prisma, 'postgresql', commits),
    provider: 'postgresql',
    commits,
    credentialChanges,
    async close() {
      await listener.close();
      await prisma.$disconnect();
    },
  };
}
