// The kiste CLI's hosted service commands against a listening service (docs/hosted-services.md):
// `expose` publishes a port (its name port-PORT unless --name, private to the account unless
// --public) and prints the URL, access and status, with a note on stderr of what keeps the URL from
// answering; `services` lists a machine's services as a table (--json: the records); `unexpose`
// removes one. The refusals — a port out of range or not a number, a bad name, a name or port taken,
// the limit per machine, an unknown machine or another account's, an installation with no address for
// services — are shown with the service's message, hint and request id, exit 1, nothing stored.
// Services need no running guest: the machines here are rows (stopped, or "running" with no guest,
// whose port therefore answers nothing).
import { createServer, Server } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Account } from '../../src/store/accounts';
import { apiKeyFor, bearer, createAccount, startTestService, TestService } from '../support/harness';
import { insertInstance } from '../support/instance-rows';
import { cliEnv, CliRun, runKiste } from '../support/kiste-cli';

jest.setTimeout(120_000);

/** The service's refusal as the CLI prints it: message with the code, hint, request id. */
const refusal = (code: string) => new RegExp(`^kiste: .*\\(code: ${code}\\)\\n {2}hint: .+\\n {2}request id: req_\\S+\\n$`);

function listenOnLoopback(server: Server): Promise<string> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as { port: number }).port}`)));
}

describe('kiste expose, services, unexpose', () => {
  let t: TestService;
  let server: Server;
  let url: string;
  let dir: string;
  let account: Account;
  let key: string;
  const kiste = (args: string[], token = key): Promise<CliRun> =>
    runKiste(args, cliEnv({ KISTE_CONFIG_DIR: join(dir, 'config'), KISTE_URL: url, KISTE_TOKEN: token }));
  const json = async (args: string[]) => {
    const run = await kiste(['--json', ...args]);
    if (run.code !== 0) throw new Error(`kiste ${args.join(' ')} exited ${run.code}: ${run.stderr}`);
    return JSON.parse(run.stdout);
  };
  const stored = () => t.services.database.prisma.hostedService.count({ where: { accountId: account.id } });

  beforeAll(async () => {
    // The service's own address is a loopback one (its base URL's default): services are published under *.localhost.
    t = await startTestService();
    server = createServer(t.app);
    url = await listenOnLoopback(server);
    dir = mkdtempSync(join(tmpdir(), 'kiste-cli-services-'));
    account = await createAccount(t);
    key = await apiKeyFor(t, account);
    await insertInstance(t, account, 'box', 'stopped', { desiredState: 'stopped' });
    await insertInstance(t, account, 'live', 'running'); // a row with no guest: nothing answers on any port
  });
  afterAll(async () => {
    await new Promise<void>((resolve) => server?.close(() => resolve()));
    await t?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('expose: port-PORT and private by default, URL, access and status printed, with why the URL does not answer yet', async () => {
    const exposed = await kiste(['expose', 'box', '5173']);
    expect(exposed.code).toBe(0);
    const lines = exposed.stdout.split('\n');
    expect(lines[0]).toMatch(/^url {5}http:\/\/port-5173-[a-z2-7]{10}\.localhost:\d+\/$/);
    expect(lines.slice(1)).toEqual(['name    port-5173', 'port    5173', 'access  account', 'status  stopped', '']);
    expect(exposed.stderr).toContain('Only your account may use http://port-5173-');
    expect(exposed.stderr).toContain('--public');
    expect(exposed.stderr).toContain('box is not running: the URL answers once it runs (`kiste resume box`).');
    // What the service keeps is what was printed.
    const read = await t.api.get('/v1/instances/box/services/port-5173').set(bearer(key)).expect(200);
    expect(read.body).toMatchObject({ port: 5173, access: 'account', description: '', public_url: lines[0]!.slice('url     '.length) });
  });

  test('expose --public --name --description, on a running machine whose port answers nothing; --json prints the record alone', async () => {
    const exposed = await kiste(['expose', 'live', '8000', '--public', '--name', 'api', '--description', 'the API server']);
    expect(exposed.code).toBe(0);
    expect(exposed.stdout).toMatch(/^url {5}http:\/\/api-[a-z2-7]{10}\.localhost:\d+\/\nname {4}api\nport {4}8000\naccess {2}public\nstatus {2}unreachable\nabout {3}the API server\n$/);
    expect(exposed.stderr).toBe('Nothing listens on port 8000 in live yet: start the app there, listening on 0.0.0.0 or localhost.\n');

    const run = await kiste(['--json', 'expose', 'live', '8001', '--public']);
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(run.stdout)).toMatchObject({ instance_name: 'live', name: 'port-8001', port: 8001, access: 'public', status: 'unreachable', public_url: expect.stringMatching(/^http:\/\/port-8001-/) });
  });

  test('services: a table of name, port, access, status and URL; --json the records; another machine\'s are not listed', async () => {
    const listed = await kiste(['services', 'live']);
    expect(listed.code).toBe(0);
    const lines = listed.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^NAME +PORT +ACCESS +STATUS +URL$/);
    const rows = lines.slice(1).map((line) => line.split(/ +/));
    expect(rows.map((row) => row.slice(0, 4)).sort()).toEqual([['api', '8000', 'public', 'unreachable'], ['port-8001', '8001', 'public', 'unreachable']]);
    for (const row of rows) expect(row[4]).toMatch(new RegExp(`^http://${row[0]}-[a-z2-7]{10}\\.localhost:\\d+/$`));

    const records = await json(['services', 'live']);
    expect(records.map((s: { name: string }) => s.name).sort()).toEqual(['api', 'port-8001']);
    expect(records.find((s: { name: string }) => s.name === 'api')).toMatchObject({ port: 8000, access: 'public', description: 'the API server' });

    await insertInstance(t, account, 'empty', 'stopped', { desiredState: 'stopped' });
    expect(await kiste(['services', 'empty'])).toMatchObject({ code: 0, stdout: 'NAME  PORT  ACCESS  STATUS  URL\n' });
    expect(await json(['services', 'empty'])).toEqual([]);
  });

  test('unexpose removes a service; a second time S10', async () => {
    await json(['expose', 'box', '3000', '--name', 'gone']);
    expect(await kiste(['unexpose', 'box', 'gone'])).toMatchObject({ code: 0, stdout: 'gone removed from box\n', stderr: '' });
    await t.api.get('/v1/instances/box/services/gone').set(bearer(key)).expect(404);
    expect((await json(['services', 'box'])).map((s: { name: string }) => s.name)).toEqual(['port-5173']);
    const again = await kiste(['unexpose', 'box', 'gone']);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(refusal('S10'));
  });

  test('refuses bad ports and names, a name or port taken, an unknown machine and another account\'s: the service\'s message, exit 1, nothing stored', async () => {
    const before = await stored();
    for (const args of [['expose', 'box', '0'], ['expose', 'box', '65536'], ['expose', 'box', '80', '--name', 'App'],
      ['expose', 'box', '80', '--name', '-web'], ['expose', 'box', '80', '--name', 'a'.repeat(53)], ['expose', 'box', '80', '--description', 'x'.repeat(501)]]) {
      const refused = await kiste(args);
      expect({ args, code: refused.code, stdout: refused.stdout }).toEqual({ args, code: 1, stdout: '' });
      expect(refused.stderr).toMatch(refusal('P01'));
    }
    // Not a number at all: the CLI says so before asking the service.
    for (const port of ['http', '80.5']) {
      expect(await kiste(['expose', 'box', port])).toMatchObject({ code: 1, stdout: '', stderr: `kiste: not a whole number: ${port}\n` });
    }
    const taken = await kiste(['expose', 'box', '9999', '--name', 'port-5173']);
    expect(taken).toMatchObject({ code: 1, stdout: '' });
    expect(taken.stderr).toMatch(refusal('S11'));
    expect(taken.stderr).toContain('box already has a service named port-5173 or one on port 9999');
    expect((await kiste(['expose', 'box', '5173', '--name', 'other'])).stderr).toMatch(refusal('S11'));

    const unknown = await kiste(['expose', 'nowhere', '80']);
    expect(unknown).toMatchObject({ code: 1, stdout: '' });
    expect(unknown.stderr).toMatch(refusal('K01'));
    expect((await kiste(['services', 'nowhere'])).stderr).toMatch(refusal('K01'));
    expect((await kiste(['unexpose', 'nowhere', 'web'])).stderr).toMatch(refusal('K01'));
    const stranger = await apiKeyFor(t, await createAccount(t));
    for (const args of [['expose', 'box', '81'], ['services', 'box'], ['unexpose', 'box', 'port-5173']]) {
      const refused = await kiste(args, stranger);
      expect({ args, code: refused.code }).toEqual({ args, code: 1 });
      expect(refused.stderr).toMatch(refusal('K01'));
    }
    // --json: the service's envelope on stderr, nothing on stdout.
    const enveloped = await kiste(['--json', 'expose', 'box', '0']);
    expect(enveloped).toMatchObject({ code: 1, stdout: '' });
    expect(JSON.parse(enveloped.stderr)).toMatchObject({ error: { code: 'P01', request_id: expect.stringMatching(/^req_/) } });

    expect(await stored()).toBe(before);
    expect((await json(['services', 'box'])).map((s: { name: string }) => s.name)).toEqual(['port-5173']); // still there
  });

  test('a machine at its limit of services: L14', async () => {
    await insertInstance(t, account, 'busy', 'stopped', { desiredState: 'stopped' });
    const limit = t.services.limits.servicesPerMachine;
    for (let n = 0; n < limit; n++) await t.api.post('/v1/instances/busy/services').set(bearer(key)).send({ name: `s${n}`, port: 3000 + n }).expect(200);
    const refused = await kiste(['expose', 'busy', '4000']);
    expect(refused).toMatchObject({ code: 1, stdout: '' });
    expect(refused.stderr).toMatch(refusal('L14'));
    expect((await kiste(['services', 'busy'])).stdout.trim().split('\n')).toHaveLength(limit + 1);
  });

  test('no credential: the CLI says how to get one', async () => {
    const run = await runKiste(['services', 'box'], cliEnv({ KISTE_CONFIG_DIR: join(dir, 'none'), KISTE_URL: url }));
    expect(run).toMatchObject({ code: 1, stdout: '' });
    expect(run.stderr).toMatch(/^kiste: no credential\n {2}hint: Run `kiste login`/);
  });
});

test('kiste expose where the service has no address for services (S12): the operator\'s settings named, exit 1', async () => {
  // A service whose own address is not a loopback one and no services domain or URL: nowhere to publish.
  const t = await startTestService({ env: { KISTE_BASE_URL: 'https://kiste.example.com' } });
  const server = createServer(t.app);
  const dir = mkdtempSync(join(tmpdir(), 'kiste-cli-services-'));
  try {
    const url = await listenOnLoopback(server);
    const account = await createAccount(t);
    await insertInstance(t, account, 'box', 'stopped', { desiredState: 'stopped' });
    const run = await runKiste(['expose', 'box', '80'], cliEnv({ KISTE_CONFIG_DIR: join(dir, 'config'), KISTE_URL: url, KISTE_TOKEN: await apiKeyFor(t, account) }));
    expect(run).toMatchObject({ code: 1, stdout: '' });
    expect(run.stderr).toMatch(refusal('S12'));
    expect(run.stderr).toMatch(/hint: .*KISTE_SERVICES_DOMAIN.*KISTE_SERVICES_URL/);
    expect(await t.services.database.prisma.hostedService.count()).toBe(0);
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
