// Operators see the fleet in the metrics (issue 22): each registered worker, whether it answers its
// heartbeat (its lease runs) and what placement could still give it (its offer within the operator's
// ceiling, less its machines' shapes).
import { randomUUID } from 'node:crypto';
import { createAccount, startTestService, type TestService } from '../support/harness';
import { insertInstance } from '../support/instance-rows';

describe('worker metrics', () => {
  let t: TestService;

  beforeAll(async () => {
    t = await startTestService();
  });
  afterAll(() => t.close());

  it('shows each worker up or not, and its free room', async () => {
    const prisma = t.services.database.prisma;
    const live = randomUUID();
    await prisma.worker.create({ data: { id: live, name: 'live', address: 'https://live.test:7443', sealedSecret: 'x', leaseUntil: new Date(Date.now() + 30_000), vcpu: 8, memoryMib: 8192, diskMib: 50_000, maxMemoryMib: 4096 } });
    await prisma.worker.create({ data: { id: randomUUID(), name: 'silent', address: 'https://silent.test:7443', sealedSecret: 'x', state: 'draining', leaseUntil: new Date(Date.now() - 1000), vcpu: 4, memoryMib: 1024, diskMib: 10_000 } });
    const account = await createAccount(t);
    await insertInstance(t, account, 'on-live', 'running', { workerId: live }); // 1 vCPU, 512 MiB, 4096 MiB of disk
    await insertInstance(t, account, 'stopped-on-live', 'stopped', { workerId: live, desiredState: 'stopped' }); // its disk only
    const { body } = await t.services.metrics.text();
    expect(body).toContain('kiste_worker_up{worker="live",state="active"} 1');
    expect(body).toContain('kiste_worker_up{worker="silent",state="draining"} 0');
    expect(body).toContain('kiste_worker_free{worker="live",resource="vcpu"} 7');
    expect(body).toContain('kiste_worker_free{worker="live",resource="memory_mib"} 3584'); // the ceiling, 4096, less 512
    expect(body).toContain('kiste_worker_free{worker="live",resource="disk_mib"} 41808');
    expect(body).toContain('kiste_worker_free{worker="silent",resource="memory_mib"} 1024');
  });
});
