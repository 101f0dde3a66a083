// The screen video between worker and control plane (worker-api.yaml OpenScreenVideo), each side
// against a hostile other over a real WebSocket on loopback. The control plane passes on only RTP
// packets of the video's shape and messages that fit ScreenVideoMessage; anything else ends that
// video, once, with the reason. The worker takes only ScreenVideoCommands; anything else ends the
// stream and closes the video (its encoder). The route takes only requests within the protocol's bounds.
import type { AddressInfo } from 'node:net';
import { WebSocket, WebSocketServer } from 'ws';
import { followScreenVideo, screenVideoPath } from '../../src/compute/remote-screen-video';
import type { ScreenInput, ScreenVideoEvents } from '../../src/media/screen-video';
import { openScreenVideo } from '../../src/worker/screen-video-streams';
import { upgradeTarget } from '../../src/worker/worker-routes';

/** An RTP packet as the encoder writes them (version 2, payload type 96). */
function rtp(bytes = 100, first = 0x80, payloadType = 96): Buffer {
  const packet = Buffer.alloc(bytes, 7);
  packet[0] = first;
  packet[1] = payloadType;
  return packet;
}

let server: WebSocketServer;
let port: number;
let onConnection: (ws: WebSocket) => void;

beforeEach(async () => {
  server = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await new Promise((resolve) => server.once('listening', resolve));
  port = (server.address() as AddressInfo).port;
  server.on('connection', (ws) => onConnection(ws));
});
afterEach(async () => {
  for (const client of server.clients) client.terminate();
  await new Promise((resolve) => server.close(resolve));
});

/** A client socket; `attach` takes it as it opens, before any message of it can be read (as WorkerClient.upgrade does). */
const connect = async (attach: (ws: WebSocket) => void = () => undefined) => {
  const ws = new WebSocket(`ws://127.0.0.1:${port}`);
  await new Promise((resolve, reject) => ws.once('open', () => resolve(attach(ws))).once('error', reject));
  return ws;
};

describe('the control plane follows a worker\'s screen video', () => {
  /** Opens a video whose worker sends `messages`; resolves with what the control plane passed on once it ended (or after 1 s). */
  async function follow(messages: (string | Buffer)[], options: { kbps?: number; onRtp?: () => void } = {}) {
    onConnection = (ws) => {
      for (const message of messages) ws.send(message, { binary: Buffer.isBuffer(message) });
    };
    const seen = { packets: 0, sizes: [] as unknown[], endings: [] as string[] };
    const ws = await connect((opened) => followScreenVideo(opened, { kbps: options.kbps ?? 2000 }, {
      onRtp: () => {
        options.onRtp?.();
        seen.packets++;
      },
      onSize: (size) => seen.sizes.push(size),
      onEnded: (reason) => seen.endings.push(reason),
    }));
    const closed = new Promise((resolve) => (ws.readyState === ws.CLOSED ? resolve(null) : ws.once('close', resolve)));
    await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 1000))]);
    return { ...seen, closed: ws.readyState === ws.CLOSED };
  }

  test('passes on RTP packets and the frame size', async () => {
    const seen = await follow([JSON.stringify({ type: 'size', width: 1280, height: 720 }), rtp(), rtp(1200), rtp(13), rtp(100, 0x80, 96 | 0x80)]);
    expect(seen).toEqual({ packets: 4, sizes: [{ width: 1280, height: 720 }], endings: [], closed: false });
  });

  test.each([
    ['a packet that is not RTP version 2', rtp(100, 0x00), /not one/],
    ['a packet of another payload type', rtp(100, 0x80, 111), /not one/],
    ['a packet too short to be RTP', rtp(11), /not one/],
    ['a header without a payload', rtp(12), /not one/],
    ['a header that names an extension', rtp(100, 0x90), /not one/],
    ['a header that names a CSRC list', rtp(100, 0x81), /not one/],
    ['a header that names padding', rtp(100, 0xa0), /not one/],
    ['a text message larger than any of the protocol\'s', JSON.stringify({ type: 'ended', reason: 'x'.repeat(5000) }), /more than 4096 bytes/],
    ['a packet larger than any the encoder writes', rtp(1501), /not one/],
    ['text that is not JSON', '{"type":', /not JSON/],
    ['a size beyond any screen', JSON.stringify({ type: 'size', width: 99_999, height: 720 }), /does not fit/],
    ['a message of no known type', JSON.stringify({ type: 'exec', argv: ['sh'] }), /does not fit/],
    ['a message with more than its shape', JSON.stringify({ type: 'size', width: 800, height: 600, extra: 1 }), /does not fit/],
  ])('ends the video, once, for %s', async (_what, message, reason) => {
    const seen = await follow([rtp(), message, rtp(), JSON.stringify({ type: 'size', width: 800, height: 600 })]);
    expect(seen.packets).toBe(1);
    expect(seen.sizes).toEqual([]);
    expect(seen.endings).toHaveLength(1);
    expect(seen.endings[0]).toMatch(reason);
    expect(seen.closed).toBe(true);
  });

  test('ends the video when the worker sends more than the bit rate allows', async () => {
    // 100 kbit/s: a burst of 2 MiB, then 50 kB a second.
    const seen = await follow(Array.from({ length: 2000 }, () => rtp(1200)), { kbps: 100 });
    expect(seen.endings).toEqual(['the worker sent more video than its bit rate allows']);
    expect(seen.packets).toBeGreaterThan(1500);
    expect(seen.packets).toBeLessThan(2000);
  });

  test('a packet the viewer\'s peer cannot take ends this video, not the process', async () => {
    const seen = await follow([rtp(), rtp()], { onRtp: () => {
      throw new RangeError('out of bounds');
    } });
    expect(seen.endings).toEqual(['a video packet could not be passed on: out of bounds']);
  });

  test('an end the worker reports is passed on with its reason, bounded', async () => {
    const seen = await follow([JSON.stringify({ type: 'ended', reason: `the screen went away ${'x'.repeat(1900)}` })]);
    expect(seen.endings).toHaveLength(1);
    expect(seen.endings[0]!.startsWith('the screen went away')).toBe(true);
    expect(seen.endings[0]!.length).toBeLessThanOrEqual(500);
  });

  test('a worker that closes the stream ends the video; one closed here reports no end', async () => {
    expect((await follow([])).endings).toEqual([]);
    onConnection = (ws) => setTimeout(() => ws.close(1000), 50);
    const endings: string[] = [];
    const ws = await connect();
    followScreenVideo(ws, { kbps: 2000 }, { onRtp: () => undefined, onSize: () => undefined, onEnded: (reason) => endings.push(reason) });
    await new Promise((resolve) => ws.once('close', resolve));
    expect(endings).toEqual(['the worker closed the screen video']);

    onConnection = () => undefined;
    const mine = await connect();
    const ownEndings: string[] = [];
    followScreenVideo(mine, { kbps: 2000 }, { onRtp: () => undefined, onSize: () => undefined, onEnded: (reason) => ownEndings.push(reason) }).close();
    await new Promise((resolve) => mine.once('close', resolve));
    expect(ownEndings).toEqual([]);
  });
});

describe('the worker serves a screen video to a hostile control plane', () => {
  /** A video that records what reaches it, from a host that says the machine runs. */
  function host(endEarly?: string) {
    const reached: (ScreenInput | 'start' | 'keyframe')[] = [];
    let closes = 0;
    let events: ScreenVideoEvents | null = null;
    const videos = {
      isRunning: async (id: string) => id === 'machine-1',
      openVideo: async (_id: string, _request: unknown, given: ScreenVideoEvents) => {
        events = given;
        if (endEarly) given.onEnded(endEarly);
        return { start: () => reached.push('start'), keyframe: () => reached.push('keyframe'), input: (input: ScreenInput) => reached.push(input), close: () => closes++ };
      },
    };
    return { videos, reached, closes: () => closes, events: () => events! };
  }
  const REQUEST = { accountId: 'acct-1', fps: 15, kbps: 2000 };

  /** Serves the video on the next connection; the client's socket and what it received. */
  async function serve(videos: ReturnType<typeof host>['videos']) {
    const opened = await openScreenVideo(videos, 'machine-1', REQUEST);
    onConnection = (ws) => opened.open(ws);
    const received: (string | Buffer)[] = [];
    let closed!: Promise<number>;
    const ws = await connect((opened) => {
      opened.on('message', (data, isBinary) => received.push(isBinary ? (data as Buffer) : String(data)));
      closed = new Promise<number>((resolve) => opened.once('close', (code) => resolve(code)));
    });
    return { ws, received, closed };
  }

  test('commands reach the video; its packets and size go out', async () => {
    const machine = host();
    const { ws, received } = await serve(machine.videos);
    for (const command of [{ type: 'start' }, { type: 'pointer', x: 10, y: 20, buttons: 1 }, { type: 'key', scancode: 0x1e, down: true }, { type: 'keyframe' }]) ws.send(JSON.stringify(command));
    await new Promise((resolve) => setTimeout(resolve, 200));
    machine.events().onSize({ width: 1024, height: 768 });
    machine.events().onRtp(rtp());
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(machine.reached).toEqual(['start', { type: 'pointer', x: 10, y: 20, buttons: 1 }, { type: 'key', scancode: 0x1e, down: true }, 'keyframe']);
    expect(received).toEqual([JSON.stringify({ type: 'size', width: 1024, height: 768 }), rtp()]);
    ws.close();
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(machine.closes()).toBeGreaterThanOrEqual(1); // the viewer's side left: the encoder goes
  });

  test.each([
    ['a binary message', Buffer.from('hi')],
    ['text that is not JSON', 'start'],
    ['a pointer off the protocol\'s range', JSON.stringify({ type: 'pointer', x: -1, y: 20, buttons: 0 })],
    ['a key without a scancode', JSON.stringify({ type: 'key', scancode: 0, down: true })],
    ['a command of no known type', JSON.stringify({ type: 'exec', argv: ['sh'] })],
  ])('ends the stream and the video for %s', async (_what, message) => {
    const machine = host();
    const { ws, closed } = await serve(machine.videos);
    ws.send(message, { binary: Buffer.isBuffer(message) });
    expect(await closed).toBe(1008);
    expect(machine.reached).toEqual([]);
    expect(machine.closes()).toBeGreaterThanOrEqual(1);
  });

  test('a video that ended before the stream opened says so and closes it; a machine that does not run gets none', async () => {
    const { received, closed } = await serve(host('the machine\'s screen went away (it stopped?)').videos);
    expect(await closed).toBe(1000);
    expect(received).toEqual([JSON.stringify({ type: 'ended', reason: 'the machine\'s screen went away (it stopped?)' })]);
    await expect(openScreenVideo(host().videos, 'machine-2', REQUEST)).rejects.toThrow(/not running/);
  });
});

describe('the OpenScreenVideo route', () => {
  test('takes a request within the protocol\'s bounds, as the control plane writes it', () => {
    const path = screenVideoPath('machine-1', { accountId: 'acct_1-x', fps: 15, kbps: 2000 });
    expect(upgradeTarget(path)).toEqual({ kind: 'video', machine: 'machine-1', request: { accountId: 'acct_1-x', fps: 15, kbps: 2000 } });
    // The control plane keeps within them.
    expect(upgradeTarget(screenVideoPath('machine-1', { accountId: 'a', fps: 500, kbps: 5 }))).toMatchObject({ request: { fps: 60, kbps: 100 } });
    expect(() => screenVideoPath('machine-1', { accountId: '../x', fps: 15, kbps: 2000 })).toThrow();
  });

  test.each([
    '/w1/machines/machine-1/screen/video?account=a&fps=0&kbps=2000',
    '/w1/machines/machine-1/screen/video?account=a&fps=61&kbps=2000',
    '/w1/machines/machine-1/screen/video?account=a&fps=15&kbps=99',
    '/w1/machines/machine-1/screen/video?account=a&fps=15&kbps=20001',
    '/w1/machines/machine-1/screen/video?account=a.b&fps=15&kbps=2000',
    '/w1/machines/machine-1/screen/video?fps=15&kbps=2000&account=a',
    '/w1/machines/machine-1/screen/video?account=a&fps=15',
    '/w1/machines/machine-1/screen/video',
  ])('refuses %s', (path) => {
    expect(upgradeTarget(path)).toMatchObject({ status: 404 });
  });
});
