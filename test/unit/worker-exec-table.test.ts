// The worker's table of started commands (worker-api.yaml StartExec/AttachExec): a command nobody
// attaches to is given up, a command has one stream at most, and the table is bounded, per machine
// too (one tenant's machine cannot take every other machine's commands).
import { AgentCallError } from '../../src/compute/agent/errors';
import type { ExecStream } from '../../src/compute/agent/exec-stream';
import { ATTACH_WITHIN_MS, ExecTable, MAX_OPEN_EXECS, MAX_OPEN_EXECS_PER_MACHINE } from '../../src/worker/agent-streams';

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
  const started = await table.start('m1', async () => stream);
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
  const { exec } = await table.start('m1', async () => stream);
  const claimed = table.claim(exec);
  expect(claimed).not.toBeNull();
  expect(table.claim(exec)).toBeNull();
  jest.advanceTimersByTime(ATTACH_WITHIN_MS * 2); // claimed: no longer on the attach timer
  expect(givenUp).toEqual([]);
  claimed!.abandon();
  expect(givenUp).toEqual([expect.objectContaining({ code: 'closed' })]);
  expect(table.size).toBe(0);
});

test(`at most ${MAX_OPEN_EXECS_PER_MACHINE} commands of one machine are open, counted from before the agent is asked; other machines are not held back`, async () => {
  const table = new ExecTable();
  let release!: () => void;
  const slow = new Promise<void>((resolve) => (release = resolve));
  // All start together: the slots are taken before any agent answers.
  const starting = Array.from({ length: MAX_OPEN_EXECS_PER_MACHINE }, () => table.start('busy', async () => (await slow, recordedCommand().stream)));
  await expect(table.start('busy', async () => recordedCommand().stream)).rejects.toMatchObject({ code: 'too_many_channels' });
  await expect(table.start('other', async () => recordedCommand().stream)).resolves.toMatchObject({ pid: 7 });
  release();
  await Promise.all(starting);
  // A start that fails gives its slot back.
  const crowded = new ExecTable();
  await expect(crowded.start('m', async () => Promise.reject(new AgentCallError('spawn_failed', 'no such program')))).rejects.toMatchObject({ code: 'spawn_failed' });
  for (let i = 0; i < MAX_OPEN_EXECS_PER_MACHINE; i++) await crowded.start('m', async () => recordedCommand().stream);
  expect(crowded.size).toBe(MAX_OPEN_EXECS_PER_MACHINE);
});

test(`at most ${MAX_OPEN_EXECS} commands are open on a worker; closing the table gives every one up`, async () => {
  const table = new ExecTable();
  const commands = Array.from({ length: MAX_OPEN_EXECS }, () => recordedCommand());
  for (const [i, { stream }] of commands.entries()) await table.start(`m${i % (MAX_OPEN_EXECS / MAX_OPEN_EXECS_PER_MACHINE)}`, async () => stream);
  let startedAnother = false;
  const refused = await table.start('fresh', async () => ((startedAnother = true), recordedCommand().stream)).catch((e: unknown) => e);
  expect(refused).toBeInstanceOf(AgentCallError);
  expect(refused).toMatchObject({ code: 'too_many_channels' });
  expect(startedAnother).toBe(false); // refused before the agent is asked
  table.closeAll();
  expect(table.size).toBe(0);
  expect(commands.every(({ givenUp }) => givenUp.length === 1)).toBe(true);
  await expect(table.start('fresh', async () => recordedCommand().stream)).resolves.toBeDefined(); // the slots are back
});
