// The database layer on the provider picked by KISTE_TEST_DB (jest runs this file for both).
import BetterSqlite3 from 'better-sqlite3';
import path from 'node:path';
import { databaseTarget, openDatabase, type Database } from '../../src/db/database';
import { migrateDatabase, readMigrations } from '../../src/db/migrate';
import { freshDatabaseUrl, openTestDatabase, type FreshDatabase } from '../support/database';
import { InstanceStore } from '../../src/store/instances';

const onPostgres = process.env.KISTE_TEST_DB === 'postgres';

async function appliedMigrations(db: Database): Promise<{ name: string; checksum: string }[]> {
  return db.prisma.$queryRawUnsafe('SELECT name, checksum FROM kiste_migrations ORDER BY name');
}

describe('migrations', () => {
  let fresh: FreshDatabase;
  beforeEach(async () => {
    fresh = await freshDatabaseUrl();
  });
  afterEach(async () => {
    await fresh.cleanup();
  });

  it('applies every migration to a fresh database, once', async () => {
    const db = await openDatabase(fresh);
    const expected = readMigrations(db.provider).map((m) => m.name);
    expect(expected.length).toBeGreaterThan(0);
    const first = await appliedMigrations(db);
    expect(first.map((m) => m.name)).toEqual(expected);
    await db.close();

    expect(await migrateDatabase(databaseTarget(fresh))).toEqual([]);
    const again = await openDatabase(fresh);
    expect(await appliedMigrations(again)).toEqual(first);
    await again.close();
  });

  it('lets two processes start at the same time', async () => {
    const target = databaseTarget(fresh);
    const [a, b] = await Promise.all([migrateDatabase(target), migrateDatabase(target)]);
    expect([...a, ...b].sort()).toEqual(readMigrations(target.provider).map((m) => m.name));
  });

  it('refuses to start when an applied migration was changed', async () => {
    const db = await openDatabase(fresh);
    await db.prisma.$executeRawUnsafe(`UPDATE kiste_migrations SET checksum = 'edited'`);
    await db.close();
    await expect(openDatabase(fresh)).rejects.toThrow(/changed after it was applied \(checksum mismatch\)/);
  });
});

describe('openDatabase', () => {
  it('rejects an unknown URL scheme', async () => {
    await expect(openDatabase({ url: 'mysql://localhost/kiste', dataDir: '/nonexistent' })).rejects.toThrow(/unsupported database URL scheme 'mysql:'/);
  });
});

describe('models', () => {
  let db: Awaited<ReturnType<typeof openTestDatabase>>;
  beforeAll(async () => {
    db = await openTestDatabase();
  });
  afterAll(async () => {
    await db.close();
  });

  it('round-trips an Account, a Session and an Event (BigInt, Json, DateTime)', async () => {
    const expiresAt = new Date('2031-02-03T04:05:06.789Z');
    const account = await db.prisma.account.create({
      data: { id: 'acc_1', email: 'ada@example.com', passwordHash: 'scrypt$x', eventSequence: 2n ** 62n },
    });
    expect(account.eventSequence).toBe(2n ** 62n);
    expect(Math.abs(account.createdAt.getTime() - Date.now())).toBeLessThan(60_000);

    await db.prisma.session.create({
      data: { id: 'ses_1', accountId: account.id, kind: 'browser', tokenHash: 'h1', expiresAt },
    });
    const data = { machine: 'm-1', sizes: [1, 2.5, -3], nested: { ok: true, none: null }, text: 'äö "q"' };
    const sequence = 2n ** 53n + 1n; // not representable as a JS number
    await db.prisma.event.create({
      data: { id: 'evt_1', accountId: account.id, sequence, type: 'machine.created', resourceType: 'machine', resourceId: 'm-1', data },
    });

    const read = await db.prisma.account.findUniqueOrThrow({ where: { id: account.id }, include: { sessions: true, events: true } });
    expect(read.eventSequence).toBe(2n ** 62n);
    expect(read.sessions[0].expiresAt.toISOString()).toBe(expiresAt.toISOString());
    expect(read.sessions[0].lastUsedAt).toBeNull();
    expect(read.events[0].sequence).toBe(sequence);
    expect(read.events[0].data).toEqual(data);

    const bySequence = await db.prisma.event.findUnique({ where: { accountId_sequence: { accountId: account.id, sequence } } });
    expect(bySequence?.id).toBe('evt_1');
  });

  it('enforces foreign keys and cascades deletes', async () => {
    await expect(
      db.prisma.session.create({ data: { id: 'ses_x', accountId: 'missing', kind: 'cli', tokenHash: 'hx', expiresAt: new Date() } }),
    ).rejects.toThrow();
    await db.prisma.account.create({ data: { id: 'acc_2', email: 'bob@example.com', passwordHash: 'p' } });
    await db.prisma.session.create({ data: { id: 'ses_2', accountId: 'acc_2', kind: 'cli', tokenHash: 'h2', expiresAt: new Date() } });
    await db.prisma.account.delete({ where: { id: 'acc_2' } });
    expect(await db.prisma.session.count({ where: { accountId: 'acc_2' } })).toBe(0);
  });

  it("clears an operation's input when an update ends the operation, and only then", async () => {
    await db.prisma.account.create({ data: { id: 'acc_3', email: 'cy@example.com', passwordHash: 'p' } });
    const instances = new InstanceStore(db.prisma);
    const input = { source_id: 'ins_source', memory: true };
    await db.prisma.instance.create({
      data: {
        id: 'ins_fork', accountId: 'acc_3', name: 'copy', image: 'universal', imageProfile: 'minimal', artifactKey: 'k', status: 'starting',
        desiredState: 'running', vcpu: 1, memoryMib: 512, diskMib: 2048, sshPublicKey: 'ssh-ed25519 AAAA', guestHostname: 'copy',
        operation: 'fork', operationStartedAt: new Date(), operationInput: input,
      },
    });
    expect((await instances.update('ins_fork', { errorMessage: 'still going' })).operationInput).toEqual(input);
    const ended = await instances.update('ins_fork', { status: 'running', operation: null, operationStartedAt: null });
    expect(ended.operation).toBeNull();
    expect(ended.operationInput).toBeNull();
  });

  // Each provider has its own storage check; neither is skipped on the other, it simply is not declared there.
  if (onPostgres) {
    it('stores data in the PostgreSQL database named by the URL', async () => {
      expect(db.provider).toBe('postgresql');
      const [row] = await db.prisma.$queryRawUnsafe<{ name: string }[]>('SELECT current_database() AS name');
      expect(db.url).toContain(`/${row!.name}`);
    });
    return;
  }

  it('keeps the SQLite file in WAL mode with foreign keys and a busy timeout', async () => {
    const pragma = async (name: string) => Object.values((await db.prisma.$queryRawUnsafe<Record<string, unknown>[]>(`PRAGMA ${name}`))[0])[0];
    expect(await pragma('journal_mode')).toBe('wal');
    expect(Number(await pragma('foreign_keys'))).toBe(1);
    expect(Number(await pragma('busy_timeout'))).toBeGreaterThanOrEqual(5000);

    // WAL is a property of the file: a separate connection sees it too.
    const raw = new BetterSqlite3(path.join(db.dataDir, 'kiste.db'), { readonly: true });
    try {
      expect(raw.pragma('journal_mode', { simple: true })).toBe('wal');
    } finally {
      raw.close();
    }
  });
});
