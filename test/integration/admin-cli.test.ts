// scripts/admin.ts as an operator runs it: a child process on the server's configuration (a fresh
// SQLite data dir, or a fresh PostgreSQL database when KISTE_TEST_DB=postgres). The key it mints
// must then work against the real app opened on the same database.
import { spawn } from 'node:child_process';
import path from 'node:path';
import pino from 'pino';
import request from 'supertest';
import type { Express } from 'express';
import { loadConfig } from '../../src/config';
import { openDatabase, type Database } from '../../src/db/database';
import { createApp } from '../../src/http/app';
import { createServices, type Services } from '../../src/services';
import { checkContract } from '../support/contract';
import { freshDatabaseUrl, type FreshDatabase } from '../support/database';

const ROOT = path.resolve(__dirname, '..', '..');
const TSX = path.join(ROOT, 'node_modules', '.bin', 'tsx');
const PASSWORD = 'a long enough password';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

describe('npm run admin (scripts/admin.ts)', () => {
  let fresh: FreshDatabase;

  /** Runs the admin script on the fresh database; no KISTE_* variable leaks in from the test's environment. */
  function admin(args: string[], options: { stdin?: string; env?: Record<string, string> } = {}): Promise<Run> {
    const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('KISTE_')));
    env.KISTE_DATA_DIR = fresh.dataDir;
    if (fresh.url) env.KISTE_DATABASE_URL = fresh.url;
    Object.assign(env, options.env);
    return new Promise((resolve, reject) => {
      const child = spawn(TSX, [path.join(ROOT, 'scripts', 'admin.ts'), ...args], { cwd: ROOT, env, stdio: ['pipe', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
      child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
      // Only a hung script is killed: eight of them start side by side below, and on a loaded 2-core
      // host one took over 25 s to print its usage and exit (CI saw code null from this killer).
      const killer = setTimeout(() => child.kill('SIGKILL'), 100_000);
      child.on('error', reject);
      child.on('close', (code) => {
        clearTimeout(killer);
        resolve({ code, stdout, stderr });
      });
      child.stdin.end(options.stdin ?? '');
    });
  }

  /** The real app on the database the script wrote to. */
  async function openApp(): Promise<{ app: Express; services: Services; database: Database }> {
    const env: Record<string, string> = { KISTE_DATA_DIR: fresh.dataDir };
    if (fresh.url) env.KISTE_DATABASE_URL = fresh.url;
    const config = loadConfig(env);
    const database = await openDatabase({ url: config.databaseUrl, dataDir: config.dataDir });
    const services = createServices(config, database);
    return { app: await createApp(services, pino({ level: 'silent' })), services, database };
  }

  beforeEach(async () => {
    fresh = await freshDatabaseUrl();
  });
  afterEach(async () => {
    await fresh.cleanup();
  });

  // Each run of the script is a Node process start (about 1 s): generous limits for slow CI machines.
  jest.setTimeout(120_000);

  it('creates an account (password on stdin), mints a key that works for GET /v1/me, lists accounts', async () => {
    const created = await admin(['create-account', '--email', 'Ops@Example.com', '--name', 'Ops'], { stdin: `${PASSWORD}\nignored\n` });
    expect(created.stderr).toContain('created account ops@example.com');
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(/^[0-9a-f-]{36}\n$/);

    const minted = await admin(['mint-key', '--email', 'ops@example.com', '--label', 'deploy bot', '--days', '7']);
    expect(minted.code).toBe(0);
    expect(minted.stdout).toMatch(/^kiste_key_[A-Za-z0-9_-]{43}\n$/); // the key and nothing else
    expect(minted.stderr).toMatch(/minted API key kiste_key_…/);
    const key = minted.stdout.trim();

    const other = await admin(['create-account', '--email', 'second@example.com'], { env: { KISTE_ADMIN_PASSWORD: PASSWORD } });
    expect(other.code).toBe(0);
    expect(other.stderr).toContain('KISTE_ADMIN_PASSWORD');

    const listed = await admin(['list-accounts']);
    expect(listed.code).toBe(0);
    const lines = listed.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^ID\s+EMAIL\s+NAME\s+CREATED\s+STATE$/);
    expect(lines.slice(1).map((line) => line.split(/\s+/)[1])).toEqual(['ops@example.com', 'second@example.com']);
    expect(lines[1]).toMatch(/ Ops .* active$/);

    const { app, services, database } = await openApp();
    try {
      const me = await request(app).get('/v1/me').set('authorization', `Bearer ${key}`).expect(checkContract).expect(200);
      expect(me.body).toMatchObject({ object: 'user', email: 'ops@example.com', name: 'Ops', id: created.stdout.trim() });
      const tokens = await request(app).get('/v1/api-tokens').set('authorization', `Bearer ${key}`).expect(checkContract).expect(200);
      expect(tokens.body).toHaveLength(1); // this list is a plain array (spec)
      const token = tokens.body[0];
      expect(token.label).toBe('deploy bot');
      const lifetimeDays = (Date.parse(token.expires_at) - Date.parse(token.created_at)) / 86_400_000;
      expect(lifetimeDays).toBeCloseTo(7, 3);
      // The password read from stdin is the account's password (first line only).
      await request(app).post('/v1/auth/login').send({ email: 'ops@example.com', password: PASSWORD }).expect(checkContract).expect(200);
      expect(await services.accounts.findByEmail('second@example.com')).not.toBeNull();
    } finally {
      await database.close();
    }
  });

  it('mints 30-day keys by default', async () => {
    expect((await admin(['create-account', '--email', 'a@example.com'], { stdin: PASSWORD })).code).toBe(0);
    const minted = await admin(['mint-key', '--email', 'a@example.com']);
    expect(minted.code).toBe(0);
    const { app, database } = await openApp();
    try {
      const res = await request(app).get('/v1/api-tokens').set('authorization', `Bearer ${minted.stdout.trim()}`).expect(checkContract).expect(200);
      const [token] = res.body;
      expect(token.label).toBe('admin-cli');
      expect((Date.parse(token.expires_at) - Date.parse(token.created_at)) / 86_400_000).toBeCloseTo(30, 3);
    } finally {
      await database.close();
    }
  });

  it('refuses bad input with a clear message and a non-zero exit status', async () => {
    const expectRefused = (run: Run, code: number, message: RegExp) => {
      expect(run.stderr).toMatch(message);
      expect(run.code).toBe(code);
      expect(run.stdout).toBe('');
    };
    // Independent of each other and of the database's contents: run side by side.
    const [short, notEmail, noEmail, wrongOption, unknownAccount, unknownCommand, noCommand, unknownOption] = await Promise.all([
      admin(['create-account', '--email', 'short@example.com'], { stdin: 'short\n' }),
      admin(['create-account', '--email', 'not-an-address'], { stdin: `${PASSWORD}\n` }),
      admin(['create-account'], { stdin: `${PASSWORD}\n` }),
      admin(['create-account', '--email', 'x@example.com', '--days', '3'], { stdin: `${PASSWORD}\n` }),
      admin(['mint-key', '--email', 'nobody@example.com']),
      admin(['frobnicate']),
      admin([]),
      admin(['list-accounts', '--bogus']),
    ]);
    expectRefused(short, 2, /at least 10 characters/);
    expectRefused(notEmail, 2, /not an e-mail address/);
    expectRefused(noEmail, 2, /needs --email/);
    expectRefused(wrongOption, 2, /takes no --days/);
    expectRefused(unknownAccount, 1, /no account with the e-mail address nobody@example.com/);
    expectRefused(unknownCommand, 2, /unknown command 'frobnicate'[\s\S]*usage:/);
    expectRefused(noCommand, 2, /no command given[\s\S]*usage:/);
    expectRefused(unknownOption, 2, /Unknown option '--bogus'/);

    expect((await admin(['create-account', '--email', 'dup@example.com'], { stdin: PASSWORD })).code).toBe(0);
    expectRefused(await admin(['create-account', '--email', 'DUP@example.com'], { stdin: PASSWORD }), 1, /already exists/);
    const badDays = await Promise.all(['0', '366', '1.5', 'ten'].map((days) => admin(['mint-key', '--email', 'dup@example.com', '--days', days])));
    for (const run of badDays) expectRefused(run, 2, /--days must be a whole number from 1 to 365/);

    const help = await admin(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^usage: npm run admin -- <command>/);
    expect(help.stdout).toContain('mint-key --email E');
  });
});
