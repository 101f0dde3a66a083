// TerminalSession with the guest side injected (an exec handle that, like the real one, can be
// iterated once): a client that takes over while the shell is still starting shares that start —
// one shell, one reader — and gets the shell's output; the first client is told it was taken over.
import { PassThrough } from 'node:stream';
import type { GuestAgents } from '../../src/compute/machine-host';
import { DEFAULT_TERMINAL_SETTINGS, TerminalSession, TYPED_EARLY_BYTES, type TerminalPeer } from '../../src/domain/terminals';

function fakeShell() {
  let iterated = false;
  const chunks: Buffer[] = [];
  let wake: (() => void) | null = null;
  const handle = {
    pid: 42,
    stdin: new PassThrough(),
    exit: new Promise<never>(() => undefined),
    cancel: async () => true,
    [Symbol.asyncIterator]() {
      if (iterated) throw new Error('exec output can be iterated only once');
      iterated = true;
      return {
        next: async () => {
          while (chunks.length === 0) await new Promise<void>((resolve) => (wake = resolve));
          return { value: { stream: 'stdout', data: chunks.shift()! }, done: false };
        },
      };
    },
  };
  return { handle, emit: (text: string) => (chunks.push(Buffer.from(text)), wake?.()) };
}

function client() {
  const seen: string[] = [];
  const ends: string[] = [];
  const peer: TerminalPeer = { output: (chunk) => seen.push(chunk.toString()), end: (_code, reason) => ends.push(reason) };
  return { peer, seen, ends };
}

test('a takeover while the shell starts shares the one start and the one reader', async () => {
  const shell = fakeShell();
  let release!: (value: unknown) => void;
  const started = new Promise((resolve) => (release = resolve));
  let starts = 0;
  const host = { agent: () => ({ exec: async () => (starts++, await started, shell.handle) }) } as unknown as GuestAgents;
  const ended: string[] = [];
  const session = new TerminalSession('acct', 'inst', 'box', 'hash', { cols: 80, rows: 24 }, {
    host, clock: { now: () => new Date() }, settings: DEFAULT_TERMINAL_SETTINGS, onEnded: () => ended.push('ended'),
  });
  const first = client();
  const second = client();
  const attachedFirst = session.attach(first.peer);
  const attachedSecond = session.attach(second.peer);
  release(undefined);
  await Promise.all([attachedFirst, attachedSecond]);
  shell.emit('$ ');
  await new Promise((resolve) => setImmediate(resolve));

  expect(starts).toBe(1);
  expect(first.ends).toEqual(['another client took over this terminal']);
  expect(second.seen.join('')).toBe('$ ');
  expect(session.ended).toBe(false);
  expect(ended).toEqual([]);
  session.end('test over');
});

test('keys typed before the shell starts are held up to TYPED_EARLY_BYTES; past that the client waits for the shell', async () => {
  const shell = fakeShell();
  let release!: (value: unknown) => void;
  const started = new Promise((resolve) => (release = resolve));
  const host = { agent: () => ({ exec: async () => (await started, shell.handle) }) } as unknown as GuestAgents;
  const session = new TerminalSession('acct', 'inst', 'box', 'hash', { cols: 80, rows: 24 }, {
    host, clock: { now: () => new Date() }, settings: DEFAULT_TERMINAL_SETTINGS, onEnded: () => undefined,
  });
  const attached = session.attach(client().peer);
  const key = Buffer.alloc(1024, 'k');
  let taken = 0;
  // A client pastes without waiting (a real one waits for each `taken`; this one is worse).
  for (let i = 0; i < TYPED_EARLY_BYTES / key.length + 10; i++) session.input(key, () => taken++);
  expect(taken).toBe(TYPED_EARLY_BYTES / key.length);

  const received: Buffer[] = [];
  shell.handle.stdin.on('data', (chunk: Buffer) => received.push(chunk));
  release(undefined);
  await attached;
  await new Promise((resolve) => setImmediate(resolve));
  expect(taken).toBe(TYPED_EARLY_BYTES / key.length + 10);
  expect(Buffer.concat(received).length).toBe((TYPED_EARLY_BYTES / key.length + 10) * key.length);
  session.end('test over');
});
