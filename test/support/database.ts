// Fresh, throw-away databases for tests. KISTE_TEST_DB picks the provider: 'sqlite' (default) or
// 'postgres' (jest.config.js runs the whole suite once with each).
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { openDatabase, type Database } from '../../src/db/database';

/** Server holding the test databases: trust auth on the development and CI machines. */
const POSTGRES_ADMIN_URL = process.env.KISTE_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface FreshDatabase {
  /** undefined = SQLite in dataDir, as the service defaults to. */
  url: string | undefined;
  dataDir: string;
  /** Drops the PostgreSQL database (disconnect first) and removes dataDir. */
  cleanup(): Promise<void>;
}

function testProvider(): 'sqlite' | 'postgres' {
  const wanted = process.env.KISTE_TEST_DB ?? 'sqlite';
  if (wanted !== 'sqlite' && wanted !== 'postgres') throw new Error(`KISTE_TEST_DB must be sqlite or postgres, got '${wanted}'`);
  return wanted;
}

async function onAdminConnection<T>(work: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: POSTGRES_ADMIN_URL });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

/** An empty database (not migrated), e.g. for a test that starts the service as a child process. */
export async function freshDatabaseUrl(): Promise<FreshDatabase> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'kiste-test-'));
  const removeDataDir = async () => rmSync(dataDir, { recursive: true, force: true });
  if (testProvider() === 'sqlite') return { url: undefined, dataDir, cleanup: removeDataDir };

  const name = `kiste_test_${randomBytes(6).toString('hex')}`; // hex only: safe as an identifier
  await onAdminConnection((client) => client.query(`CREATE DATABASE ${name}`));
  const url = new URL(POSTGRES_ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    dataDir,
    cleanup: async () => {
      // FORCE (PostgreSQL 13+) also ends connections a crashed child process may have left behind.
      await onAdminConnection((client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
      await removeDataDir();
    },
  };
}

/** A fresh, migrated database; close() disconnects and then drops it. */
export async function openTestDatabase(): Promise<Database & { url: string | undefined; dataDir: string }> {
  const fresh = await freshDatabaseUrl();
  let db: Database;
  try {
    db = await openDatabase({ url: fresh.url, dataDir: fresh.dataDir });
  } catch (error) {
    await fresh.cleanup();
    throw error;
  }
  return {
    ...db,
    url: fresh.url,
    dataDir: fresh.dataDir,
    close: async () => {
      try {
        await db.close();
      } finally {
        await fresh.cleanup();
      }
    },
  };
}

/** Reads (or writes) the database a service process runs on, beside it: a connection of its own, closed after. */
export async function besideTheService<T>(fresh: FreshDatabase, work: (database: Database) => Promise<T>): Promise<T> {
  const database = await openDatabase({ url: fresh.url, dataDir: fresh.dataDir });
  try {
    return await work(database);
  } finally {
    await database.close();
  }
}
