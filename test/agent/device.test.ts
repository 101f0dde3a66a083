// The agent's character-device link (what it uses on /dev/virtio-ports/org.kiste.agent), exercised
// on a raw pseudo-terminal that socat bridges to a unix socket. Covers the non-blocking stream over
// the port and reopening it after it fails. Needs socat (Debian package socat; .ci/run installs it).
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentClient } from '../../src/compute/agent-client';
import { AgentProcess, eventually, sleep } from './harness';

jest.setTimeout(60_000);

describe('device link (pty through socat)', () => {
  it('has socat to stand in for the virtio port', () => {
    expect(() => execFileSync('socat', ['-V'], { stdio: 'ignore' })).not.toThrow();
  });

  let dir: string;
  let port: string;
  let hostSocket: string;
  let socat: ChildProcess | null = null;
  let agent: AgentProcess;

  async function startSocat(): Promise<void> {
    // The pty first (socat opens its addresses in order), so the agent can open it before a host connects.
    socat = spawn('socat', [`PTY,link=${port},rawer,echo=0`, `UNIX-LISTEN:${hostSocket}`], { stdio: 'ignore' });
    // The socket file exists from bind(); connecting before listen() is refused, so wait for the listening flag.
    await eventually(() => existsSync(port) && unixSocketListening(hostSocket), 5000, 'socat');
  }

  /** True once some process listens on the unix socket at this path (/proc/net/unix, flag __SO_ACCEPTCON). */
  function unixSocketListening(path: string): boolean {
    return readFileSync('/proc/net/unix', 'utf8')
      .split('\n')
      .some((line) => {
        const fields = line.trim().split(/\s+/);
        return fields[7] === path && (parseInt(fields[3], 16) & 0x10000) !== 0;
      });
  }

  async function stopSocat(): Promise<void> {
    const s = socat;
    socat = null;
    if (!s || s.exitCode !== null) return;
    const exited = new Promise((r) => s.once('exit', r));
    s.kill('SIGTERM');
    await exited;
  }

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kiste-device-'));
    port = join(dir, 'port');
    hostSocket = join(dir, 'host.sock');
    await startSocat();
    agent = await AgentProcess.start({ mode: 'device', env: { KISTE_AGENT_PORT: port } });
  });

  afterAll(async () => {
    await agent?.stop();
    await stopSocat();
    rmSync(dir, { recursive: true, force: true });
  });

  test('requests, binary output and reopening the port after it failed', async () => {
    const client = AgentClient.unixSocket(hostSocket, { reconnect: false });
    try {
      await client.start(5000);
      const result = await client.run({ argv: ['sh', '-c', 'head -c 3000000 /dev/urandom | tee /dev/stderr | sha256sum'] });
      expect(result.exit_code).toBe(0);
      const { createHash } = await import('node:crypto');
      expect(result.stdout.toString().split(' ')[0]).toBe(createHash('sha256').update(result.stderr).digest('hex'));
    } finally {
      client.close();
    }

    // The port goes away (the pty's other end closes): the agent reopens it once it is back.
    await stopSocat();
    await sleep(300);
    await startSocat();
    const again = AgentClient.unixSocket(hostSocket, { reconnect: false });
    try {
      await again.start(10_000);
      expect((await again.run({ argv: ['echo', 'reopened'] })).stdout.toString()).toBe('reopened\n');
    } finally {
      again.close();
    }
    expect(agent.stderr.some((line) => line.includes('agent port closed, reopening'))).toBe(true);
  });
});
