// A guest that does not end what it started, or says more than it may (issue 21): run() collects
// at most its output limit and ends by its deadline; a command with a timeout, or one being
// cancelled, ends on the host's side when no exit comes; an exit that does not fit the spec's
// statuses fails the command. Each time the channel is closed towards the guest (which stops the
// command there) and the link goes on.
import { AgentClient } from '../../src/compute/agent-client';
import { encodeJson, encodeOutputHead, Frame, FrameKind } from '../../src/protocol/agent';
import { HONEST, StandInAgent, type Request } from './stand-in-agent';

jest.setTimeout(30_000);

const EXIT_GRACE_MS = 200;

let agent: StandInAgent;
let client: AgentClient;
let channel = 0;
let closed: number[] = [];
/** What the stand-in does after answering exec.start (the channel is in `channel`). */
let afterStart: (a: StandInAgent) => void = () => undefined;

beforeAll(async () => {
  agent = await StandInAgent.start();
  agent.answer = (request: Request, a) => {
    if (request.method === 'exec.start') {
      channel += 1;
      a.respond(request.id, { result: { channel, pid: 4242, window_bytes: 0 } });
      afterStart(a);
      return undefined;
    }
    if (request.method === 'exec.cancel') return { accepted: true };
    return HONEST(request, a);
  };
  agent.streamFrame = (frame: Frame) => {
    if (frame.kind === FrameKind.CLOSE) closed.push(frame.channel);
  };
  client = agent.client({ exitGraceMs: EXIT_GRACE_MS });
  await client.start();
});

beforeEach(() => {
  closed = [];
  afterStart = () => undefined;
});

afterAll(async () => {
  client?.close();
  await agent?.close();
});

function output(a: StandInAgent, sequence: number, bytes: number): void {
  a.send(Buffer.concat([encodeOutputHead(channel, 'stdout', sequence, bytes), Buffer.alloc(bytes, 0x61)]));
}

function exitEvent(status: unknown, exitCode: unknown = 0): Buffer {
  return encodeJson(FrameKind.EVENT, channel, { event: 'exec.exit', data: { channel, status, exit_code: exitCode, signal: null, duration_ms: 5, stdout_bytes: 0, stderr_bytes: 0 } });
}

async function closedSoon(which: number): Promise<void> {
  const deadline = Date.now() + 2000;
  while (!closed.includes(which)) {
    if (Date.now() > deadline) throw new Error(`channel ${which} was not closed towards the guest`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

test('run() collects at most its output limit: an agent that ignores the limit fails the run', async () => {
  afterStart = (a) => {
    for (let i = 0; i < 10; i++) output(a, i, 32 * 1024); // 320 KiB where 64 KiB were allowed
    a.send(exitEvent('exited'));
  };
  await expect(client.run({ argv: ['yes'], output_limit_bytes: 64 * 1024 })).rejects.toMatchObject({ code: 'protocol', message: expect.stringContaining('beyond its limit') });
  await closedSoon(channel);
});

test('run() has a deadline: a guest that never ends the command fails the run', async () => {
  const started = Date.now();
  await expect(client.run({ argv: ['sleep', 'forever'] }, { timeoutMs: 300 })).rejects.toMatchObject({ code: 'timeout' });
  expect(Date.now() - started).toBeLessThan(2000);
  await closedSoon(channel);
});

test('a command past its timeout, or being cancelled, ends on the host side when no exit comes', async () => {
  const timed = await client.exec({ argv: ['sleep', 'forever'], timeout_ms: 100 });
  let started = Date.now();
  await expect(timed.exit).rejects.toMatchObject({ code: 'timeout' });
  expect(Date.now() - started).toBeGreaterThanOrEqual(100 + EXIT_GRACE_MS - 20);
  await closedSoon(timed.channel);

  const cancelled = await client.exec({ argv: ['sleep', 'forever'] });
  started = Date.now();
  expect(await cancelled.cancel(50)).toBe(true);
  await expect(cancelled.exit).rejects.toMatchObject({ code: 'timeout', message: expect.stringContaining('cancelled') });
  expect(Date.now() - started).toBeLessThan(2000);
  await closedSoon(cancelled.channel);
});

test('an exit that does not fit the spec fails the command; one that fits ends it', async () => {
  afterStart = (a) => a.send(exitEvent('pwned\u001b[31m', 1e6));
  const bad = await client.exec({ argv: ['true'] });
  await expect(bad.exit).rejects.toMatchObject({ code: 'protocol' });
  await closedSoon(bad.channel);

  afterStart = (a) => a.send(exitEvent('signaled', 137));
  const good = await client.exec({ argv: ['true'] });
  await expect(good.exit).resolves.toMatchObject({ status: 'signaled', exit_code: 137 });
});
