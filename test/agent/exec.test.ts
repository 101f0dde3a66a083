// exec through the real agent bundle over a unix socket: output order, exit codes, signals,
// timeouts, output limits, cancel, spawn failures, stdin, process groups.
import { readdirSync, readFileSync } from 'node:fs';
import { AgentCallError, AgentClient, ExecChunk } from '../../src/compute/agent-client';
import { AgentProcess, eventually, processGone, sleep } from './harness';

jest.setTimeout(60_000);

let agent: AgentProcess;
let client: AgentClient;

beforeAll(async () => {
  agent = await AgentProcess.start();
  client = agent.client();
  await client.start();
});

afterAll(async () => {
  client?.close();
  await agent?.stop();
});

async function collect(iterable: AsyncIterable<ExecChunk>): Promise<ExecChunk[]> {
  const chunks: ExecChunk[] = [];
  for await (const chunk of iterable) chunks.push(chunk);
  return chunks;
}

test('hello reports protocol, version and boot id', () => {
  const hello = client.hello!;
  expect(hello.protocol_version).toBe(1);
  expect(hello.agent_version).toMatch(/^\d+\.\d+\.\d+\+[0-9a-f]{12}$/);
  expect(hello.boot_id).toMatch(/^[0-9a-f-]{36}$/);
  expect(hello.methods).toEqual(expect.arrayContaining(['exec.start', 'metrics', 'personalise', 'tcp.open', 'time.set', 'shutdown']));
});

test('echo: stdout, exit 0', async () => {
  const result = await client.run({ argv: ['echo', 'hello', 'world'] });
  expect(result.stdout.toString()).toBe('hello world\n');
  expect(result.stderr.length).toBe(0);
  expect(result).toMatchObject({ status: 'exited', exit_code: 0, signal: null, stdout_bytes: 12, stderr_bytes: 0 });
  expect(result.duration_ms).toBeGreaterThanOrEqual(0);
});

test('stdout and stderr keep their order in one sequence', async () => {
  const script = 'for i in 1 2 3 4 5; do echo out$i; sleep 0.03; echo err$i >&2; sleep 0.03; done';
  const handle = await client.exec({ argv: ['sh', '-c', script] });
  const chunks = await collect(handle);
  expect(chunks.map((c) => c.sequence)).toEqual(chunks.map((_, i) => i));
  const text = chunks.map((c) => `${c.stream}:${c.data.toString().trim()}`);
  expect(text).toEqual([1, 2, 3, 4, 5].flatMap((i) => [`stdout:out${i}`, `stderr:err${i}`]));
  expect(await handle.exit).toMatchObject({ status: 'exited', exit_code: 0, stdout_bytes: 25, stderr_bytes: 25 });
});

test('exit codes, cwd and env', async () => {
  const failed = await client.run({ argv: ['sh', '-c', 'exit 42'] });
  expect(failed).toMatchObject({ status: 'exited', exit_code: 42, signal: null });
  const env = await client.run({ argv: ['sh', '-c', 'echo "$FOO:$(pwd):$HOME"'], cwd: '/tmp', env: { FOO: 'bar' } });
  expect(env.stdout.toString()).toBe('bar:/tmp:/root\n');
});

test('a command killed by a signal is signaled', async () => {
  const result = await client.run({ argv: ['sh', '-c', 'kill -TERM $$'] });
  expect(result).toMatchObject({ status: 'signaled', signal: 15, exit_code: 143 });
});

test('exec.signal reaches the process group', async () => {
  const handle = await client.exec({ argv: ['sleep', '30'] });
  await sleep(100);
  expect(await handle.signal('SIGINT')).toBe(true);
  await collect(handle);
  expect(await handle.exit).toMatchObject({ status: 'signaled', signal: 2, exit_code: 130 });
});

test('timeout kills the whole process group', async () => {
  const started = Date.now();
  const handle = await client.exec({ argv: ['sh', '-c', 'sleep 30 & echo $!; wait'], timeout_ms: 400 });
  const chunks = await collect(handle);
  const exit = await handle.exit;
  expect(exit).toMatchObject({ status: 'timed_out', signal: 9, exit_code: 137 });
  expect(Date.now() - started).toBeLessThan(5000);
  const child = Number(Buffer.concat(chunks.map((c) => c.data)).toString().trim());
  expect(child).toBeGreaterThan(0);
  await eventually(() => processGone(child), 3000, 'background sleep to die');
});

test('output limit cuts the output and kills the command', async () => {
  const handle = await client.exec({ argv: ['head', '-c', '10000000', '/dev/zero'], output_limit_bytes: 1000 });
  const chunks = await collect(handle);
  const exit = await handle.exit;
  expect(exit.status).toBe('output_limit_exceeded');
  expect(exit.stdout_bytes).toBe(1000);
  expect(chunks.reduce((n, c) => n + c.data.length, 0)).toBe(1000);
});

test('cancel: SIGTERM first', async () => {
  const handle = await client.exec({ argv: ['sleep', '30'] });
  expect(await handle.cancel()).toBe(true);
  await collect(handle);
  expect(await handle.exit).toMatchObject({ status: 'cancelled', signal: 15 });
});

test('cancel: SIGKILL after the grace period when SIGTERM is ignored', async () => {
  const handle = await client.exec({ argv: ['sh', '-c', 'trap "" TERM; echo ready; while :; do sleep 0.05; done'] });
  const iterator = handle[Symbol.asyncIterator]();
  expect((await iterator.next()).value?.data.toString()).toBe('ready\n');
  const started = Date.now();
  await handle.cancel(300);
  while (!(await iterator.next()).done);
  const exit = await handle.exit;
  expect(exit).toMatchObject({ status: 'cancelled', signal: 9 });
  expect(Date.now() - started).toBeGreaterThanOrEqual(250);
});

test('a missing program is a clear spawn error; a missing cwd a bad request', async () => {
  const error = await client.exec({ argv: ['/nonexistent/kiste-no-such-program'] }).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(AgentCallError);
  expect((error as AgentCallError).code).toBe('spawn_failed');
  expect((error as AgentCallError).message).toMatch(/cannot run \/nonexistent\/kiste-no-such-program: no such file or directory \(ENOENT\)/);
  const cwd = await client.exec({ argv: ['true'], cwd: '/nonexistent-dir' }).catch((e: unknown) => e);
  expect((cwd as AgentCallError).code).toBe('bad_request');
  const empty = await client.request('exec.start', { argv: [] }).catch((e: unknown) => e);
  expect((empty as AgentCallError).code).toBe('bad_request');
  // The session is still fine afterwards.
  expect((await client.run({ argv: ['true'] })).exit_code).toBe(0);
});

test('stdin: true feeds the command', async () => {
  const handle = await client.exec({ argv: ['sh', '-c', 'tr a-z A-Z; echo done'], stdin: true });
  const big = Buffer.alloc(3 * 1024 * 1024, 'x');
  const output = collect(handle);
  await new Promise<void>((resolve, reject) => {
    handle.stdin!.write('hello ');
    handle.stdin!.write(big);
    handle.stdin!.end(() => resolve());
    handle.stdin!.once('error', reject);
  });
  const text = Buffer.concat((await output).map((c) => c.data)).toString();
  expect(text.slice(0, 6)).toBe('HELLO ');
  expect(text.length).toBe(6 + big.length + 5);
  expect(text.endsWith('XXdone\n')).toBe(true);
  expect((await handle.exit).exit_code).toBe(0);
});

test('stdout and stderr are real pipes: /dev/stdout and /dev/stderr can be opened', async () => {
  const result = await client.run({ argv: ['sh', '-c', 'echo to-err > /dev/stderr; echo to-out > /dev/stdout; echo x | tee /dev/stderr'] });
  expect(result).toMatchObject({ status: 'exited', exit_code: 0 });
  expect(result.stderr.toString()).toBe('to-err\nx\n');
  expect(result.stdout.toString()).toBe('to-out\nx\n');
});

test('a background child that keeps the pipes open does not hold the command', async () => {
  const started = Date.now();
  const result = await client.run({ argv: ['sh', '-c', 'sleep 3 & echo started'] });
  expect(result).toMatchObject({ status: 'exited', exit_code: 0 });
  expect(result.stdout.toString()).toBe('started\n');
  expect(Date.now() - started).toBeLessThan(2500);
});

test('many commands at once', async () => {
  const results = await Promise.all(Array.from({ length: 30 }, (_, i) => client.run({ argv: ['sh', '-c', `echo ${i}; exit ${i % 7}`] })));
  results.forEach((r, i) => {
    expect(r.stdout.toString()).toBe(`${i}\n`);
    expect(r.exit_code).toBe(i % 7);
  });
});

test('a command whose start answer came too late is stopped, not left blocked', async () => {
  const token = `30.${process.pid}${Date.now() % 100000}`;
  const running = () =>
    readdirSync('/proc')
      .filter((d) => /^\d+$/.test(d))
      .some((pid) => {
        try {
          return readFileSync(`/proc/${pid}/cmdline`, 'utf8') === `sleep\0${token}\0` && !processGone(Number(pid));
        } catch {
          return false;
        }
      });
  // The agent is stopped while the call waits, so its answer comes after the deadline for certain.
  process.kill(agent.pid, 'SIGSTOP');
  try {
    const error = await client.exec({ argv: ['sleep', token] }, { timeoutMs: 200 }).catch((e: unknown) => e);
    expect((error as AgentCallError).code).toBe('timeout');
  } finally {
    process.kill(agent.pid, 'SIGCONT');
  }
  // The agent takes requests in order: once a later one is answered, the late command was started
  // and its answer came back. The client then closes its channel and the agent stops the command
  // (one left running would be up well within the pause below).
  expect((await client.run({ argv: ['true'] })).exit_code).toBe(0);
  await sleep(300);
  await eventually(() => !running(), 5000, 'the orphaned command to be stopped');
});

test('unknown channel and unknown method answer errors', async () => {
  const signal = await client.request('exec.signal', { channel: 999999, signal: 'SIGTERM' }).catch((e: unknown) => e);
  expect((signal as AgentCallError).code).toBe('no_such_channel');
  const unknown = await (client.request as (m: string, p: unknown) => Promise<unknown>)('nope', {}).catch((e: unknown) => e);
  expect((unknown as AgentCallError).code).toBe('unknown_method');
});
