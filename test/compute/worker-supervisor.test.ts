// The control plane's supervision of its local kiste-worker (issue 22, one box): the worker is up
// only while it answers with its secret; killed, hung or left by an earlier control plane, it is
// replaced; a stop ends it with SIGTERM; and it never outlives the control plane (pdeathsig), also
// after a kill -9 of the control plane. Real worker processes, no machines.
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { egressTable } from '../../src/compute/jail';
import { pollUntil } from '../../src/compute/qemu/wait';
import { WorkerSupervisor, type WorkerState } from '../../src/compute/worker-supervisor';
import { TEST_IMAGE_DIR } from '../support/images';
import { testUidBaseFor } from '../support/jail';
import { ServiceProcess } from '../support/service-process';

jest.setTimeout(180_000);

const silent = { info: () => undefined, warn: () => undefined };
/** Waits until `condition` holds; fails the test with `what` after `ms`. */
async function until(what: string, condition: () => boolean, ms: number): Promise<void> {
  if (!(await pollUntil(() => (condition() ? true : undefined), ms, 50))) throw new Error(`timed out waiting until ${what}`);
}
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('the local worker under supervision', () => {
  let dataDir: string;
  let env: NodeJS.ProcessEnv;
  const supervisors: WorkerSupervisor[] = [];

  beforeAll(() => {
    dataDir = mkdtempSync(join(tmpdir(), 'kiste-supervised-'));
    const base = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('KISTE_')));
    env = { ...base, KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_ACCELERATOR: 'tcg', KISTE_LOG_LEVEL: 'warn', KISTE_IMAGE_PROFILE: 'minimal', KISTE_MACHINE_UID_BASE: String(testUidBaseFor(dataDir)) };
  });
  afterAll(async () => {
    for (const supervisor of supervisors) await supervisor.stop();
    await new Promise((done) => execFile('nft', ['delete', 'table', 'inet', egressTable(testUidBaseFor(dataDir))], done));
    rmSync(dataDir, { recursive: true, force: true });
  });

  function supervise(states: WorkerState[] = []): WorkerSupervisor {
    const supervisor = new WorkerSupervisor({ dataDir, env, logger: silent, checkEveryMs: 300, restartMinMs: 200, restartMaxMs: 1000, onState: (state) => states.push(state), adopt: (client, epoch) => client.fence(epoch + 1), removeStrays: async () => undefined });
    supervisors.push(supervisor);
    return supervisor;
  }

  it('is up once the worker answers with its secret; killed with -9, it is down, then a new one is up', async () => {
    const states: WorkerState[] = [];
    const supervisor = supervise(states);
    expect(await supervisor.start()).toBe('up');
    await expect(supervisor.worker!.hello()).resolves.toMatchObject({ protocol_version: 2 });
    const first = supervisor.pid!;
    expect(readFileSync(join(dataDir, 'worker.pid'), 'utf8').trim()).toBe(String(first));

    process.kill(first, 'SIGKILL');
    await until('the worker is down', () => supervisor.state === 'down', 10_000);
    expect(supervisor.worker).toBeNull(); // what the API answers N01 for
    await until('a new worker is up', () => supervisor.state === 'up', 60_000);
    expect(supervisor.pid).not.toBe(first);
    await expect(supervisor.worker!.hello()).resolves.toMatchObject({ protocol_version: 2 });
    expect(states).toEqual(['starting', 'up', 'down', 'starting', 'up']);
  });

  it('replaces a worker that stops answering', async () => {
    const supervisor = supervisors[0]!;
    const hung = supervisor.pid!;
    process.kill(hung, 'SIGSTOP');
    try {
      await until('another worker is up', () => supervisor.state === 'up' && supervisor.pid !== hung, 60_000);
      await until('the hung worker is gone', () => !alive(hung), 10_000);
    } finally {
      if (alive(hung)) process.kill(hung, 'SIGKILL');
    }
    await expect(supervisor.worker!.hello()).resolves.toMatchObject({ protocol_version: 2 });
  });

  it('ends the worker with SIGTERM on stop, and leaves no pid file', async () => {
    const supervisor = supervisors[0]!;
    const pid = supervisor.pid!;
    await supervisor.stop();
    expect(supervisor.state).toBe('stopped');
    expect(supervisor.worker).toBeNull();
    expect(alive(pid)).toBe(false);
    expect(existsSync(join(dataDir, 'worker.pid'))).toBe(false);
  });

  it('ends a worker an earlier control plane left behind before it starts its own', async () => {
    // A worker started by an earlier control plane whose pid file is still there.
    const stale = new ServiceProcess({ KISTE_DATA_DIR: dataDir, KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_ACCELERATOR: 'tcg' }, { entry: 'src/worker/main.ts', ready: 'kiste-worker is listening' });
    try {
      await stale.listening();
      writeFileSync(join(dataDir, 'worker.pid'), `${stale.child.pid}\n`);
      const supervisor = supervise();
      expect(await supervisor.start()).toBe('up');
      await stale.waitExit(10_000);
      expect(supervisor.pid).not.toBe(stale.child.pid);
      await expect(supervisor.worker!.hello()).resolves.toMatchObject({ protocol_version: 2 });
      await supervisor.stop();
    } finally {
      await stale.ensureStopped();
    }
  });

  it('never outlives its control plane: a control plane killed with -9 takes its worker along', async () => {
    const script = resolve(__dirname, '../fixtures/worker-supervisor-process.ts');
    const parent = spawn(process.execPath, ['--import', 'tsx', script, dataDir], { env, stdio: ['ignore', 'pipe', 'inherit'] });
    let output = '';
    parent.stdout!.on('data', (chunk) => (output += chunk));
    await until('the control plane says its worker\'s pid', () => /worker pid (\d+)/.test(output), 90_000);
    const worker = Number(/worker pid (\d+)/.exec(output)![1]);
    expect(alive(worker)).toBe(true);
    parent.kill('SIGKILL');
    await until('the worker is gone with its control plane', () => !alive(worker), 15_000);
  });
});
