// The local worker's log lines as the service passes them on: marked as the worker's (a worker taken
// over through a guest cannot pass a line off as the service's), and bounded however it writes.
import { PassThrough } from 'node:stream';
import { relayWorkerOutput, WORKER_LINE_MAX, workerLine } from '../../src/compute/worker-output';

describe('worker output', () => {
  it('marks a JSON line as the worker\'s and keeps its fields, also one that claims to be the service', () => {
    const forged = workerLine('{"level":30,"msg":"kiste is listening","source":"service"}');
    expect(JSON.parse(forged)).toEqual({ level: 30, msg: 'kiste is listening', source: 'worker' });
    expect(forged).toContain('"msg":"kiste is listening"'); // what log searches look for stays as it was
  });

  it('prefixes any other line and replaces control characters', () => {
    expect(workerLine('plain text')).toBe('[worker] plain text');
    expect(workerLine('[1, 2]')).toBe('[worker] [1, 2]');
    expect(workerLine('{not json')).toBe('[worker] {not json');
    expect(workerLine('bell\u0007 and escape \u001b[31m')).toBe('[worker] bell? and escape ?[31m');
  });

  it('relays lines split across chunks, cuts a long one and drops the rest of it', async () => {
    const from = new PassThrough();
    const lines: string[] = [];
    relayWorkerOutput(from, (line) => lines.push(line));
    from.write('{"msg":"fir');
    from.write('st"}\nsecond\n');
    for (let i = 0; i < 10; i++) from.write('x'.repeat(WORKER_LINE_MAX)); // one line of 160 KiB, no newline yet
    from.write('tail of the long line\nafter\nlast without newline');
    from.end();
    await new Promise((resolve) => setImmediate(resolve));
    expect(lines[0]).toBe('{"msg":"first","source":"worker"}');
    expect(lines[1]).toBe('[worker] second');
    expect(lines[2]).toBe(`[worker] ${'x'.repeat(WORKER_LINE_MAX)}…`);
    expect(lines.slice(3)).toEqual(['[worker] after', '[worker] last without newline']);
  });
});
