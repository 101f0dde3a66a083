// Bulk output through the real agent: throughput with a fast reader, bounded buffering with a slow
// one (the command is held back by the pipe, the agent's memory stays flat), and the round trip of
// `exec true`. Figures are printed, never asserted (speed is measured against a baseline by
// `npm run bench:exec` and `bench:worker`; a timed bound here fails whenever the host is busy).
import { readFileSync } from 'node:fs';
import { AgentClient } from '../../src/compute/agent-client';
import { AgentProcess, sleep } from './harness';

jest.setTimeout(120_000);

const MB = 1_000_000;
const SIZE = 50 * 1024 * 1024;
const WINDOW = 1024 * 1024;

let agent: AgentProcess;
let client: AgentClient;

beforeAll(async () => {
  agent = await AgentProcess.start();
  client = agent.client({ windowBytes: WINDOW });
  await client.start();
});

afterAll(async () => {
  client?.close();
  await agent?.stop();
});

function writtenBytes(pid: number): number {
  try {
    return Number(/^wchar:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/io`, 'utf8'))?.[1] ?? 0);
  } catch {
    return 0;
  }
}

test('exec stdout with a fast reader: all 50 MiB arrive', async () => {
  const started = performance.now();
  const handle = await client.exec({ argv: ['head', '-c', String(SIZE), '/dev/zero'] });
  let bytes = 0;
  for await (const chunk of handle) bytes += chunk.data.length;
  const seconds = (performance.now() - started) / 1000;
  expect(bytes).toBe(SIZE);
  expect(await handle.exit).toMatchObject({ status: 'exited', stdout_bytes: SIZE });
  console.log(`exec stdout throughput: ${(SIZE / MB / seconds).toFixed(1)} MB/s (${SIZE} bytes in ${seconds.toFixed(2)} s)`);
});

test('a slow reader holds the command back; the agent buffers at most a window', async () => {
  const baselineKib = agent.rssKib();
  const handle = await client.exec({ argv: ['head', '-c', String(SIZE), '/dev/urandom'] });

  // Read nothing for a while: the command must stall once the window and the pipe are full.
  await sleep(1000);
  const stalledAt = writtenBytes(handle.pid);
  await sleep(500);
  expect(writtenBytes(handle.pid)).toBe(stalledAt);
  // window + pipe buffer (64 KiB) + at most one read per pipe held by the agent, plus slack
  expect(stalledAt).toBeLessThan(WINDOW + 1024 * 1024);
  expect(handle.bufferedBytes).toBeLessThanOrEqual(WINDOW);

  // Then read slowly, sampling the agent's memory.
  let maxKib = agent.rssKib();
  let bytes = 0;
  let chunks = 0;
  for await (const chunk of handle) {
    bytes += chunk.data.length;
    chunks += 1;
    if (chunks % 8 === 0) {
      await sleep(2);
      maxKib = Math.max(maxKib, agent.rssKib());
      expect(handle.bufferedBytes).toBeLessThanOrEqual(WINDOW);
    }
  }
  expect(bytes).toBe(SIZE);
  expect((await handle.exit).status).toBe('exited');
  console.log(
    `slow reader: command stalled at ${(stalledAt / 1024).toFixed(0)} KiB written; agent RSS ${(baselineKib / 1024).toFixed(1)} MiB before, max ${(maxKib / 1024).toFixed(1)} MiB during 50 MiB`,
  );
  // Buffering the output would add 50 MiB; allow GC slack.
  expect(maxKib - baselineKib).toBeLessThan(24 * 1024);
});

test('exec true round trip', async () => {
  for (let i = 0; i < 10; i += 1) await client.run({ argv: ['true'] }); // warm up
  const samples: number[] = [];
  for (let i = 0; i < 200; i += 1) {
    const started = performance.now();
    const result = await client.run({ argv: ['true'] });
    samples.push(performance.now() - started);
    expect(result.exit_code).toBe(0);
  }
  samples.sort((a, b) => a - b);
  const p50 = samples[Math.floor(samples.length * 0.5)];
  const p99 = samples[Math.floor(samples.length * 0.99)];
  console.log(`exec true round trip over the socket: p50 ${p50.toFixed(2)} ms, p99 ${p99.toFixed(2)} ms`);
});
