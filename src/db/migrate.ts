// kiste's own migration runner: applies prisma/migrations/<provider>/<name>/migration.sql files
// (written by scripts/db-migration.ts) at start-up. Prisma's `migrate deploy` needs the schema engine
// binary, which cannot be downloaded here, so we keep the bookkeeping ourselves in kiste_migrations.
// Uses the raw drivers: Prisma's client is not needed to run plain SQL scripts.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Client } from 'pg';

export type Provider = 'sqlite' | 'postgresql';
export type MigrationTarget = { provider: 'sqlite'; file: string } | { provider: 'postgresql'; url: string };
export interface Migration {
  name: string;
  sql: string;
  checksum: string;
}

/** How long SQLite waits for another connection's write lock before failing with SQLITE_BUSY. */
export const SQLITE_BUSY_TIMEOUT_MS = 10_000;
/** pg advisory lock id serialising migration runs of concurrently starting processes ("kiste" in hex). */
const POSTGRES_MIGRATION_LOCK = '461195539301';

/** The folder holding package.json, found by walking up: works from src/ (tsx, ts-jest) and dist/src/. */
export function packageRoot(from = __dirname): string {
  for (let dir = from; ; dir = path.dirname(dir)) {
    if (existsSync(path.join(dir, 'package.json'))) return dir;
    if (path.dirname(dir) === dir) throw new Error(`no package.json above ${from}`);
  }
}

export function migrationsDir(provider: Provider): string {
  return path.join(packageRoot(), 'prisma', 'migrations', provider);
}

/** Line endings are normalised so a CRLF checkout does not look like an edited migration. */
export function checksumOf(sql: string): string {
  return createHash('sha256').update(sql.replace(/\r\n/g, '\n')).digest('hex');
}

/** The provider's migrations in name (= timestamp) order. */
export function readMigrations(provider: Provider, dir = migrationsDir(provider)): Migration[] {
  if (!existsSync(dir)) throw new Error(`migrations folder ${dir} is missing`);
  return readdirSync(dir, { withFileTypes: true })
    .filter((entry) => entry.isDirectory() && existsSync(path.join(dir, entry.name, 'migration.sql')))
    .map((entry) => entry.name)
    .sort()
    .map((name) => {
      const sql = readFileSync(path.join(dir, name, 'migration.sql'), 'utf8');
      return { name, sql, checksum: checksumOf(sql) };
    });
}

/** Refuses to run against a database whose history does not match the migration files. */
function verifyHistory(applied: Map<string, string>, migrations: Migration[]): void {
  const known = new Map(migrations.map((m) => [m.name, m.checksum]));
  for (const [name, checksum] of applied) {
    if (!known.has(name)) {
      throw new Error(`database has migration ${name} applied, which this version of kiste does not know (downgrade?)`);
    }
    if (known.get(name) !== checksum) {
      throw new Error(`migration ${name} was changed after it was applied (checksum mismatch); add a new migration instead`);
    }
  }
}

function failed(name: string, error: unknown): Error {
  return new Error(`migration ${name} failed: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
}

/** Applies the pending migrations; returns the names applied by this call. */
export async function migrateDatabase(target: MigrationTarget, dir = migrationsDir(target.provider)): Promise<string[]> {
  const migrations = readMigrations(target.provider, dir);
  return target.provider === 'sqlite' ? migrateSqlite(target.file, migrations) : migratePostgres(target.url, migrations);
}

function migrateSqlite(file: string, migrations: Migration[]): string[] {
  const db = new BetterSqlite3(file, { timeout: SQLITE_BUSY_TIMEOUT_MS });
  try {
    db.pragma('journal_mode = WAL'); // persistent: every later connection to the file uses WAL
    db.exec(`CREATE TABLE IF NOT EXISTS kiste_migrations (
      name TEXT PRIMARY KEY, checksum TEXT NOT NULL, applied_at TEXT NOT NULL)`);
    const rows = db.prepare('SELECT name, checksum FROM kiste_migrations').all() as { name: string; checksum: string }[];
    const applied = new Map(rows.map((r) => [r.name, r.checksum]));
    verifyHistory(applied, migrations);
    // Prisma's SQLite migrations rebuild tables (create copy, DROP old, rename). With foreign keys on,
    // DROP TABLE would cascade-delete child rows, and the PRAGMA in the script is a no-op inside a
    // transaction. So: keys off around the transaction, foreign_key_check before commit (SQLite's
    // documented procedure for schema changes).
    db.pragma('foreign_keys = OFF');
    const done: string[] = [];
    for (const migration of migrations.filter((m) => !applied.has(m.name))) {
      db.exec('BEGIN IMMEDIATE'); // takes the write lock now: a second process waits here
      try {
        // The other process may have applied it while we waited for the lock.
        if (db.prepare('SELECT 1 FROM kiste_migrations WHERE name = ?').get(migration.name)) {
          db.exec('ROLLBACK');
          continue;
        }
        db.exec(migration.sql);
        const violations = db.pragma('foreign_key_check') as unknown[];
        if (violations.length > 0) throw new Error(`foreign key violations: ${JSON.stringify(violations.slice(0, 5))}`);
        db.prepare('INSERT INTO kiste_migrations (name, checksum, applied_at) VALUES (?, ?, ?)').run(
          migration.name,
          migration.checksum,
          new Date().toISOString(),
        );
        db.exec('COMMIT');
        done.push(migration.name);
      } catch (error) {
        if (db.inTransaction) db.exec('ROLLBACK');
        throw failed(migration.name, error);
      }
    }
    return done;
  } finally {
    db.close();
  }
}

async function migratePostgres(url: string, migrations: Migration[]): Promise<string[]> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    // Session lock held for the whole run: a second process starting at the same time waits, then
    // finds everything applied. Also covers CREATE TABLE IF NOT EXISTS, which races on PostgreSQL.
    await client.query('SELECT pg_advisory_lock($1)', [POSTGRES_MIGRATION_LOCK]);
    await client.query(`CREATE TABLE IF NOT EXISTS kiste_migrations (
      name text PRIMARY KEY, checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const { rows } = await client.query<{ name: string; checksum: string }>('SELECT name, checksum FROM kiste_migrations');
    const applied = new Map(rows.map((r) => [r.name, r.checksum]));
    verifyHistory(applied, migrations);
    const done: string[] = [];
    for (const migration of migrations.filter((m) => !applied.has(m.name))) {
      try {
        await client.query('BEGIN');
        await client.query(migration.sql); // no parameters: simple protocol, multiple statements allowed
        await client.query('INSERT INTO kiste_migrations (name, checksum) VALUES ($1, $2)', [migration.name, migration.checksum]);
        await client.query('COMMIT');
        done.push(migration.name);
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {});
        throw failed(migration.name, error);
      }
    }
    return done;
  } finally {
    await client.end(); // ends the session, which releases the advisory lock
  }
}
