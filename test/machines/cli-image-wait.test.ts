// `kiste create` while the service's machine image is still being built (503 K06): on a terminal the
// CLI shows the build step the service names in its spinner, asks again after Retry-After, and goes
// on with the create once the image is ready; Ctrl-C ends the wait with nothing created. No machine
// boots: the account is at its machine limit, so the create that gets past K06 ends at L02.
import { createServer, Server } from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ERRORS } from '../../src/generated/errors';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { TEST_SSH_KEY, insertInstance } from '../support/instance-rows';
import { apiKeyFor, createAccount, startTestService, TestService } from '../support/harness';
import { cliEnv, spawnKisteOnTerminal } from '../support/kiste-cli';

jest.setTimeout(300_000);

describe('kiste create while the image is being built', () => {
  let t: TestService;
  let server: Server;
  let url: string;
  let dir: string;
  /** When each POST /v1/instances reached the service. */
  let creates: number[];

  /** `kiste create` on a terminal with a new account's key; its output so far, and its end. */
  async function startCreate() {
    const account = await createAccount(t);
    for (let i = 0; i < t.services.limits.machines; i++) await insertInstance(t, account, `parked-${i}`, 'stopped', { desiredState: 'stopped' });
    const env = cliEnv({ KISTE_URL: url, KISTE_TOKEN: await apiKeyFor(t, account), KISTE_CONFIG_DIR: join(dir, 'config') });
    const child = spawnKisteOnTerminal(['create', 'probe', '--vcpu', '1', '--memory', '768', '--disk', '2048', '--ssh-key', join(dir, 'key.pub')], env);
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const rows = () => t.services.database.prisma.instance.count({ where: { accountId: account.id } });
    const shown = async (text: string, timeoutMs: number) => {
      const deadline = Date.now() + timeoutMs;
      while (!output.includes(text)) {
        if (Date.now() > deadline) throw new Error(`the CLI never showed ${JSON.stringify(text)}; it showed ${JSON.stringify(output)}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    };
    return { child, exited, rows, shown, get output() { return output; } };
  }

  beforeAll(async () => {
    await ensureTestImage();
    // The image folder holds a built image, but the service has not looked yet: K06 until refreshImage.
    t = await startTestService({ env: { KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_IMAGE_PROFILE: 'minimal' } });
    server = createServer((req, res) => {
      if (req.method === 'POST' && req.url === '/v1/instances') creates.push(Date.now());
      t.app(req, res);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    dir = mkdtempSync(join(tmpdir(), 'kiste-cli-image-'));
    writeFileSync(join(dir, 'key.pub'), `${TEST_SSH_KEY}\n`);
  });

  beforeEach(() => {
    creates = [];
    t.services.compute.inProcess!.machineHost.setBuildState('minimal', { state: 'building', step: '3/7 guest agent', error: null });
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    await t?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('Ctrl-C ends the wait; nothing is created', async () => {
    const cli = await startCreate();
    await cli.shown('The machine image is still being built (step 3/7 guest agent). Waiting for it…', 60_000);
    cli.child.stdin.write('\x03');
    const code = await Promise.race([cli.exited, new Promise((resolve) => setTimeout(() => resolve('still running'), 10_000))]);
    expect(code).toBe(128 + 2); // the CLI ended by SIGINT, as script(1) reports it
    expect(creates).toHaveLength(1);
    expect(await cli.rows()).toBe(t.services.limits.machines);
  });

  test('waits out K06 showing the step, asks again after Retry-After, and goes on once the image is ready', async () => {
    const cli = await startCreate();
    await cli.shown('The machine image is still being built (step 3/7 guest agent). Waiting for it…', 60_000);
    expect(creates).toHaveLength(1);
    expect(await cli.rows()).toBe(t.services.limits.machines);

    expect(await t.services.machineHost.refreshImage('minimal')).not.toBeNull();
    expect(await cli.exited).toBe(1);
    // The second create came after the Retry-After of K06 and got the create's own answer: the limit.
    expect(creates).toHaveLength(2);
    expect(creates[1]! - creates[0]!).toBeGreaterThanOrEqual(ERRORS.K06.retryAfterSeconds! * 1000 - 100);
    expect(cli.output).toMatch(/kiste: An account can have at most \d+ machines\. \(code: L02\)/);
    expect(await cli.rows()).toBe(t.services.limits.machines);
  });
});
