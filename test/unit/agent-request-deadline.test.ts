// An answer that arrives after its call's deadline is late even when the event loop reads it before
// the call's timer runs (a busy process polls I/O first): the caller gets its timeout, and the
// answer goes to the late-result path, which closes what it opened.
import { PassThrough } from 'node:stream';
import { CONTROL_CHANNEL, encodeJson, Frame, FrameKind, HEADER_BYTES } from '../../src/protocol/agent';
import { AgentCallError } from '../../src/compute/agent/errors';
import { LinkWriter } from '../../src/compute/agent/link-writer';
import { RequestTable } from '../../src/compute/agent/requests';

function answer(id: number, result: unknown): Frame {
  const frame = encodeJson(FrameKind.RESPONSE, CONTROL_CHANNEL, { id, result });
  return { kind: FrameKind.RESPONSE, channel: CONTROL_CHANNEL, payload: frame.subarray(HEADER_BYTES) };
}

function busyFor(ms: number): void {
  const until = Date.now() + ms;
  while (Date.now() <= until) {
    /* the event loop is held, as under load */
  }
}

test('an answer after the deadline fails the call with timeout and is handed to the late path', async () => {
  const late: unknown[] = [];
  const faults: string[] = [];
  const table = new RequestTable((reason) => faults.push(reason), (result) => late.push(result));
  const registered: unknown[] = [];
  const call = table.send(new LinkWriter(new PassThrough()), 'exec.start', { argv: ['true'] }, 5, (result) => registered.push(result));
  busyFor(10);
  table.onResponse(answer(1, { channel: 7, pid: 42, window_bytes: 0 }));
  const error = await call.catch((e: unknown) => e);
  expect(error).toBeInstanceOf(AgentCallError);
  expect((error as AgentCallError).code).toBe('timeout');
  expect(registered).toEqual([]);
  expect(late).toEqual([{ channel: 7, pid: 42, window_bytes: 0 }]);
  expect(faults).toEqual([]);
});

test('an answer within the deadline settles the call', async () => {
  const late: unknown[] = [];
  const table = new RequestTable(() => undefined, (result) => late.push(result));
  const call = table.send(new LinkWriter(new PassThrough()), 'exec.start', { argv: ['true'] }, 5_000);
  table.onResponse(answer(1, { channel: 7, pid: 42, window_bytes: 0 }));
  await expect(call).resolves.toMatchObject({ channel: 7, pid: 42 });
  expect(late).toEqual([]);
});
