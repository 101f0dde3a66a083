// Control-plane replicas on one PostgreSQL: the periodic jobs that must run once (account
// deletions, retention, expiry, checkpoints, alert checks) run in the replica holding the advisory
// lock; when it is killed with -9 another takes over and finishes what is due (here an account
// deletion asked of it). On SQLite one process serves, and it always runs them.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import request from 'supertest';
import { checkContract } from '../support/contract';
import { besideTheService, freshDatabaseUrl, type FreshDatabase } from '../support/database';
import { freePort, ServiceProcess } from '../support/service-process';
import { ADMIN, serviceEnv, waitUntil } from '../support/service-recovery';

jest.setTimeout(120_000);

const LEADS = 'this replica now runs the periodic jobs';
const FOLLOWS = 'another replica runs the periodic jobs';

describe('periodic jobs across replicas', () => {
  let fresh: FreshDatabase;
  const started: ServiceProcess[] = [];

  beforeAll(async () => {
    fresh = await freshDatabaseUrl();
  });
  afterAll(async () => {
    for (const service of started) await service.ensureStopped();
    await fresh.cleanup();
  });

  async function start(name: string): Promise<{ service: ServiceProcess; url: string }> {
    const port = await freePort();
    // On PostgreSQL each replica is a host of its own; SQLite lives in the one data folder.
    const dataDir = fresh.url ? join(fresh.dataDir, name) : fresh.dataDir;
    mkdirSync(dataDir, { recursive: true });
    const service = new ServiceProcess(serviceEnv(fresh, port, { KISTE_DATA_DIR: dataDir, KISTE_COMPUTE: 'in-process' })) // no machines: no worker;
    started.push(service);
    await service.listening();
    return { service, url: `http://127.0.0.1:${port}` };
  }

  const deletionState = () => besideTheService(fresh, async (database) =>
    (await database.prisma.accountDeletion.findFirst({ where: { email: ADMIN.email } }))?.state ?? null);

  it('one replica runs them; another takes over when it is killed, and finishes a deletion asked of it', async () => {
    const first = await start('first');
    let serving = first;
    if (fresh.url) {
      expect(first.service.output).toContain(LEADS);
      const second = await start('second');
      expect(second.service.output).toContain(FOLLOWS);
      expect(second.service.output).not.toContain(LEADS);
      first.service.killHard();
      await first.service.waitExit(10_000);
      // The dead replica's session ends with its process, and the lock with it.
      await waitUntil('the other replica to take over', () => second.service.output.includes(LEADS), 30_000, 100);
      serving = second;
    }
    const login = await request(serving.url).post('/v1/auth/login').send(ADMIN).expect(checkContract).expect(200);
    const cookie = (login.headers['set-cookie'] as unknown as string[]).find((line) => line.startsWith('kiste_session='))!.split(';')[0]!;
    await request(serving.url).delete('/v1/me').set('cookie', cookie).set('x-csrf-token', login.body.csrf)
      .send({ confirm: ADMIN.email, password: ADMIN.password }).expect(checkContract).expect(202);
    await waitUntil('the deletion to finish', async () => (await deletionState()) === 'completed', 60_000, 250);
  });
});
