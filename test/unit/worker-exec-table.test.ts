// The worker's table of started commands (worker-api.yaml StartExec/AttachExec): a command nobody
// attaches to is given up, a command has one stream at most, and the table is bounded.
import { AgentCallError } from '../../src/compute/agent/errors';
import type { ExecStream } from '../../src/compute/agent/exec-stream';
import { ATTACH_WITHIN_MS, ExecTable, MAX_OPEN_EXECS } from '../../src/worker/agent-streams';

/** A command that only records what the table does to it. */
function recordedCommand(pid = 7) {
  const givenUp: AgentCallError[] = [];
  const stream = {
    pid,
    stdin: null,
    exit: new Promise(() => undefined),
    giveUp: (error: AgentCallError) => void givenUp.push(error),
  } as unknown as ExecStream;
  return { stream, givenUp };
}

afterEach(() => jest.useRealTimers());

test('a command nobody attaches to within the time is given up and leaves the table', async () => {
  jest.useFakeTimers();
  const table = new ExecTable();
  const { stream, givenUp } = recordedCommand(42);
  const started = await table.start(async () => stream);
  expect(started).toEqual({ exec: expect.stringMatching(/^[0-9a-f]{32}$/), pid: 42 });
  expect(table.find(started.exec)).toBe(stream);
  jest.advanceTimersByTime(ATTACH_WITHIN_MS - 1);
  expect(givenUp).toEqual([]);
  jest.advanceTimersByTime(1);
  expect(givenUp).toEqual([expect.objectContaining({ code: 'closed' })]);
  expect(table.find(started.exec)).toBeNull();
  expect(table.claim(started.exec)).toBeNull();
});

test('a command is claimed for one stream only; one whose stream never opened is given up', async () => {
  jest.useFakeTimers();
  const table = new ExecTable();
  const { stream, givenUp } = recordedCommand();
  const { exec } = await table.start(async () => stream);
  const claimed = table.claim(exec);
  expect(claimed).not.toBeNull();
  expect(table.claim(exec)).toBeNull();
  jest.advanceTimersByTime(ATTACH_WITHIN_MS * 2); // claimed: no longer on the attach timer
  expect(givenUp).toEqual([]);
  claimed!.abandon();
  expect(givenUp).toEqual([expect.objectContaining({ code: 'closed' })]);
  expect(table.size).toBe(0);
});

test(`at most ${MAX_OPEN_EXECS} commands are open; closing the table gives every one up`, async () => {
  const table = new ExecTable();
  const commands = Array.from({ length: MAX_OPEN_EXECS }, () => recordedCommand());
  for (const { stream } of commands) await table.start(async () => stream);
  let startedAnother = false;
  const refused = await table.start(async () => ((startedAnother = true), recordedCommand().stream)).catch((e: unknown) => e);
  expect(refused).toBeInstanceOf(AgentCallError);
  expect(refused).toMatchObject({ code: 'too_many_channels' });
  expect(startedAnother).toBe(false); // refused before the agent is asked
  table.closeAll();
  expect(table.size).toBe(0);
  expect(commands.every(({ givenUp }) => givenUp.length === 1)).toBe(true);
});
