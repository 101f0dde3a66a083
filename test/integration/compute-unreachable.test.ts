// What the API does while the host of the machines cannot be reached (a local worker that died and
// is being started again: the host's calls fail with HostUnreachableError, as SupervisedWorker's
// do): calls that need it answer 503 N01 with Retry-After 30, GET /v1/status and /status.json say
// so, an operation it cut short stays open with its goal (202, no error state, no alert) and the
// reconciler finishes it once the host answers again. The real worker process and its kill -9 are
// test/machines/local-worker.test.ts's subject; here the host is the in-process one with its
// answers replaced, so the rules are proved on both databases.
import { HostUnreachableError } from '../../src/compute/machine-host';
import { WorkerUnreachableError } from '../../src/compute/worker-client';
import { SupervisedWorker } from '../../src/compute/supervised-worker';
import { AgentCallError } from '../../src/compute/agent/errors';
import { bearer, cliTokenFor, createAccount, startTestService, TestService } from '../support/harness';
import { insertInstance, TEST_SSH_KEY } from '../support/instance-rows';

const away = () => new WorkerUnreachableError('POST /w1/machines/x/stop: the compute worker is not running now (it is being started again)');

describe('while the compute worker cannot be reached', () => {
  let t: TestService;

  beforeAll(async () => {
    t = await startTestService();
  });
  beforeEach(() => {
    jest.spyOn(t.services.machineHost, 'currentImage').mockReturnValue({ profile: 'minimal', version: 'v2026.01.01-0123abcd', artifactKey: 'k' });
  });
  afterEach(() => jest.restoreAllMocks());
  afterAll(() => t.close());

  it('a worker that is not up fails each call at once as unreachable', async () => {
    const calls = new SupervisedWorker({ worker: null });
    await expect(calls.call('GET', '/w1/checks', 'WorkerChecks')).rejects.toBeInstanceOf(HostUnreachableError);
    await expect(calls.upgrade('/w1/machines/x/screen/rfb', 'OpenScreen', () => null)).rejects.toBeInstanceOf(WorkerUnreachableError);
  });

  it('answers N01 before the handler to every call that needs compute, and to none other', async () => {
    const account = await createAccount(t);
    const auth = bearer(await cliTokenFor(t, account));
    await insertInstance(t, account, 'kept', 'running');
    const reachable = jest.spyOn(t.services.machineHost, 'reachable').mockReturnValue(false);
    const exec = jest.spyOn(t.services.machineHost, 'agent');
    for (const [method, path, body] of [
      ['post', '/v1/instances/kept/exec', { argv: ['true'] }],
      ['post', '/v1/instances/kept/stop', {}],
      ['delete', '/v1/instances/kept', undefined],
      ['get', '/v1/instances/kept/metrics', undefined],
      ['post', '/v1/instances', { profile: 'desktop', name: 'new-one', vcpu: 1, memory_mib: 512, disk_mib: 2048, ssh_public_key: TEST_SSH_KEY }],
    ] as const) {
      const res = await t.api[method](path).set(auth).send(body).expect(503);
      expect({ path, code: res.body.error.code, retryAfter: res.headers['retry-after'] }).toEqual({ path, code: 'N01', retryAfter: '30' });
    }
    expect(exec).not.toHaveBeenCalled();
    // What needs only the database answers as ever, and nothing stored changed.
    expect((await t.api.get('/v1/instances/kept').set(auth).expect(200)).body).toMatchObject({ status: 'running', desired_state: 'running' });
    await t.api.get('/v1/instances').set(auth).expect(200);
    // Bad input is still told as such first.
    expect((await t.api.post('/v1/instances/kept/exec').set(auth).send({ argv: 'not a list' }).expect(400)).body.error.code).toMatch(/^P/);
    expect(reachable).toHaveBeenCalled();
  });

  it('answers N01 with Retry-After 30 to a create, and the status says why', async () => {
    jest.spyOn(t.services.machineHost, 'isolationProblem').mockRejectedValue(away());
    const account = await createAccount(t);
    const auth = bearer(await cliTokenFor(t, account));
    const res = await t.api.post('/v1/instances').set(auth).send({ profile: 'desktop', name: 'later', vcpu: 1, memory_mib: 512, disk_mib: 2048, ssh_public_key: TEST_SSH_KEY }).expect(503);
    expect(res.body.error).toMatchObject({ code: 'N01', type: 'compute_unavailable', retryable: true });
    expect(res.headers['retry-after']).toBe('30');
    expect(await t.services.database.prisma.instance.count({ where: { accountId: account.id } })).toBe(0);

    const status = (await t.api.get('/v1/status').set(auth).expect(200)).body;
    expect(status.status).toBe('degraded');
    expect(status.machines).toMatchObject({ available: false, cause: 'compute_unreachable' });
    expect((await t.api.get('/status.json').expect(200)).body.components).toContainEqual({ name: 'machines', status: 'degraded' });
  });

  it('answers N01 to a call whose agent link is lost because the worker is', async () => {
    const account = await createAccount(t);
    const auth = bearer(await cliTokenFor(t, account));
    await insertInstance(t, account, 'busy', 'running');
    jest.spyOn(t.services.machineHost, 'agent').mockReturnValue({
      metrics: () => Promise.reject(new AgentCallError('disconnected', 'the worker is not running', { cause: away() })),
    } as never);
    const res = await t.api.get('/v1/instances/busy/metrics').set(auth).expect(503);
    expect(res.body.error.code).toBe('N01');
    expect(res.headers['retry-after']).toBe('30');
  });

  it('keeps an operation it cut short open, and the reconciler finishes it once the worker is back', async () => {
    const account = await createAccount(t);
    const auth = bearer(await cliTokenFor(t, account));
    const row = await insertInstance(t, account, 'stopping-later', 'running');
    const host = t.services.machineHost;
    const stop = jest.spyOn(host, 'stop').mockRejectedValue(away());
    const answer = await t.api.post('/v1/instances/stopping-later/stop').set(auth).send({}).expect(202);
    expect(answer.body).toMatchObject({ status: 'stopping' });
    const open = (await t.services.database.prisma.instance.findUnique({ where: { id: row.id } }))!;
    expect({ operation: open.operation, status: open.status, desiredState: open.desiredState, errorMessage: open.errorMessage })
      .toEqual({ operation: 'stop', status: 'stopping', desiredState: 'stopped', errorMessage: null });
    expect(await t.services.database.prisma.alert.count({ where: { accountId: account.id } })).toBe(0);
    // A second operation is refused meanwhile: the first still holds the machine.
    expect((await t.api.post('/v1/instances/stopping-later/stop').set(auth).send({ snapshot: true }).expect(409)).body.error.code).toBe('K05');

    // The worker is back: the machine still runs there, and the stop the caller asked for is finished.
    stop.mockResolvedValue({ sessionSaved: false });
    jest.spyOn(host, 'adopt').mockImplementation(async (id) => id === row.id);
    jest.spyOn(host, 'hasSession').mockResolvedValue(false);
    await t.services.instances.reconcile({ cleanUp: false });
    const done = (await t.services.database.prisma.instance.findUnique({ where: { id: row.id } }))!;
    expect({ operation: done.operation, status: done.status }).toEqual({ operation: null, status: 'stopped' });
    expect(stop).toHaveBeenLastCalledWith(row.id, { saveSession: false });
    const events = (await t.api.get('/v1/events').set(auth).expect(200)).body.data.map((event: { type: string }) => event.type);
    expect(events).toContain('instance.stopped');
    expect(events).not.toContain('instance.error');
  });

  it('finishes a stop that asked for the memory with the memory saved', async () => {
    const account = await createAccount(t);
    const auth = bearer(await cliTokenFor(t, account));
    const row = await insertInstance(t, account, 'saved-later', 'running');
    const host = t.services.machineHost;
    const stop = jest.spyOn(host, 'stop').mockRejectedValue(away());
    await t.api.post('/v1/instances/saved-later/stop').set(auth).send({ snapshot: true }).expect(202);
    // Its session was not saved before the worker went: only the caller's wish says to save it.
    stop.mockResolvedValue({ sessionSaved: true });
    jest.spyOn(host, 'adopt').mockImplementation(async (id) => id === row.id);
    jest.spyOn(host, 'hasSession').mockResolvedValue(false);
    await t.services.instances.reconcile({ cleanUp: false });
    expect(stop).toHaveBeenLastCalledWith(row.id, { saveSession: true });
    const done = (await t.services.database.prisma.instance.findUnique({ where: { id: row.id } }))!;
    expect({ status: done.status, sessionSaved: done.sessionSaved, operation: done.operation, operationInput: done.operationInput })
      .toEqual({ status: 'stopped', sessionSaved: true, operation: null, operationInput: null });
  });

  it('a reconciler pass the worker leaves again ends without rolling anything back', async () => {
    const account = await createAccount(t);
    const row = await insertInstance(t, account, 'left-alone', 'running');
    const adopt = jest.spyOn(t.services.machineHost, 'adopt').mockRejectedValue(away());
    await expect(t.services.instances.reconcile({ cleanUp: false })).resolves.toBeUndefined(); // skipped, not rolled back
    expect(adopt).toHaveBeenCalled();
    const after = (await t.services.database.prisma.instance.findUnique({ where: { id: row.id } }))!;
    expect({ status: after.status, operation: after.operation }).toEqual({ status: 'running', operation: null });
  });

  it('a pass while the API serves leaves a machine a request took meanwhile to that request', async () => {
    const account = await createAccount(t);
    const auth = bearer(await cliTokenFor(t, account));
    const first = await insertInstance(t, account, 'adopted-first', 'running');
    const taken = await insertInstance(t, account, 'taken-meanwhile', 'running');
    const ended = await insertInstance(t, account, 'ended-meanwhile', 'running');
    const host = t.services.machineHost;
    let finishStop!: (value: { sessionSaved: boolean }) => void;
    const stop = jest.spyOn(host, 'stop').mockImplementation(() => new Promise((resolve) => (finishStop = resolve)));
    let stopAnswer: Promise<unknown> | undefined;
    jest.spyOn(host, 'hasSession').mockResolvedValue(false);
    jest.spyOn(host, 'adopt').mockImplementation(async (id) => {
      if (id === taken.id) {
        // While the pass looks for the machine on the worker, its owner stops it through the API.
        stopAnswer = t.api.post('/v1/instances/taken-meanwhile/stop').set(auth).send({}).then((res) => res.status);
        for (let i = 0; i < 200 && !t.services.instances.operations.isRunning(taken.id); i++) await new Promise((resolve) => setTimeout(resolve, 10));
        expect(t.services.instances.operations.isRunning(taken.id)).toBe(true);
      }
      return id === first.id; // the stop under way may have ended its QEMU already
    });
    const ours = [first.id, taken.id, ended.id];
    const pass = t.services.instances.reconcile({ cleanUp: false });
    await pass;
    // The stop is still the request's: the pass neither finished nor undid it.
    const during = (await t.services.database.prisma.instance.findUnique({ where: { id: taken.id } }))!;
    expect({ operation: during.operation, status: during.status }).toEqual({ operation: 'stop', status: 'stopping' });
    finishStop({ sessionSaved: false });
    expect(await stopAnswer).toBe(200);
    expect(stop).toHaveBeenCalledTimes(1);
    const rows = await t.services.database.prisma.instance.findMany({ where: { id: { in: ours } } });
    const byName = Object.fromEntries(rows.map((row) => [row.name, { status: row.status, operation: row.operation }]));
    expect(byName).toEqual({
      'adopted-first': { status: 'running', operation: null },
      'taken-meanwhile': { status: 'stopped', operation: null },
      // A machine found ended is claimed before it is written stopped, and let go after.
      'ended-meanwhile': { status: 'stopped', operation: null },
    });
    const stopped = (await t.api.get('/v1/events').set(auth).expect(200)).body.data
      .filter((event: { type: string }) => event.type === 'instance.stopped')
      .map((event: { data: { name: string; reason?: string } }) => `${event.data.name}${event.data.reason ? ` (${event.data.reason})` : ''}`);
    expect(stopped.sort()).toEqual(['ended-meanwhile (service_restart)', 'taken-meanwhile']);
  });
});
