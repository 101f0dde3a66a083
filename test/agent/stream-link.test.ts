// The agent's link writer: frames queued in one callback of the event loop reach the port as one
// write (each write to a virtio port is a virtio buffer and a doorbell of its own, so a frame header
// written apart from its payload would cost a whole write). The stream is a recording stand-in.
import type * as net from 'node:net';
import { StreamLink } from '../../agent/src/link';

class RecordingStream {
  destroyed = false;
  readonly writes: Buffer[] = [];
  private readonly pending: (() => void)[] = [];

  write(data: Buffer, callback?: () => void): boolean {
    this.writes.push(Buffer.from(data));
    if (callback) this.pending.push(callback);
    return true;
  }

  /** The OS took everything written so far. */
  complete(): void {
    for (const callback of this.pending.splice(0)) callback();
  }
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('StreamLink', () => {
  test('joins the frames sent in one callback into one write, in order, and reports them written together', async () => {
    const stream = new RecordingStream();
    const link = new StreamLink(stream as unknown as net.Socket);
    const done: string[] = [];
    link.send([Buffer.from('head1'), Buffer.from('payload-one')], () => done.push('first'));
    link.send([Buffer.from('window')]);
    link.send([Buffer.from('head2'), Buffer.from('payload-two')], () => done.push('second'));
    expect(stream.writes).toHaveLength(0); // nothing before the turn ends
    await turn();
    expect(stream.writes.map((w) => w.toString())).toEqual(['head1payload-onewindowhead2payload-two']);
    expect(done).toEqual([]);
    stream.complete();
    expect(done).toEqual(['first', 'second']);

    link.send([Buffer.from('later')]);
    await turn();
    expect(stream.writes.map((w) => w.toString())).toEqual(['head1payload-onewindowhead2payload-two', 'later']);
  });

  test('drops what is still queued (a SYNC ends the session it belongs to) and writes nothing to a closed stream', async () => {
    const stream = new RecordingStream();
    const link = new StreamLink(stream as unknown as net.Socket);
    const done: string[] = [];
    link.send([Buffer.from('stale')], () => done.push('stale'));
    link.dropQueued();
    link.send([Buffer.from('sync-ok')]);
    await turn();
    expect(stream.writes.map((w) => w.toString())).toEqual(['sync-ok']);
    stream.complete();
    expect(done).toEqual([]);

    stream.destroyed = true;
    link.send([Buffer.from('after close')]);
    await turn();
    expect(stream.writes).toHaveLength(1);
  });
});
