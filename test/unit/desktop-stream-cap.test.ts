// The desktop stream cap (409 D07) under concurrency: every offer holds its slot from before its
// first await until its stream ends, so offers that arrive together cannot all pass the check.
// Strict fakes for the store, the screen's video and the streamer; each answers a little later, as a
// database and a WebRTC peer do.
import type { MachineDisplay } from '../../src/compute/machine-display';
import { Desktops, VIDEO_STREAMS_PER_ACCOUNT } from '../../src/domain/desktops';
import type { Instances } from '../../src/domain/instances';
import { KisteError } from '../../src/errors';
import type { DesktopStreamer, StreamRequest } from '../../src/media/desktop-streamer';
import type { ScreenVideo } from '../../src/media/screen-video';
import type { DesktopSession, DesktopStore } from '../../src/store/desktop';
import type { InstanceStore } from '../../src/store/instances';
import { strictFake } from '../support/strict-fake';

const OFFER = 'v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n';
const later = <T>(value: T) => new Promise<T>((resolve) => setTimeout(() => resolve(value), 5 + Math.random() * 20));

function setup(options: { screenFails?: boolean } = {}) {
  const sessions = new Map<string, DesktopSession>();
  const session = (accountId: string, id: string): DesktopSession => {
    const made = { id, accountId, instanceId: 'inst-1', linkId: 'link-1', credentialId: 'cred-1', createdAt: new Date(), expiresAt: new Date(Date.now() + 3600_000), endedAt: null };
    sessions.set(id, made);
    return made;
  };
  const store = strictFake<DesktopStore>('DesktopStore', {
    findSession: (accountId, id) => later(sessions.get(id)?.accountId === accountId ? sessions.get(id)! : null),
    endSession: async (accountId, id) => sessions.get(id)?.accountId === accountId,
  });
  const instanceStore = strictFake<InstanceStore>('InstanceStore', {
    findById: (id) => later({ id, name: 'box', status: 'running' } as Awaited<ReturnType<InstanceStore['findById']>>),
  });
  const display = strictFake<MachineDisplay>('MachineDisplay', {
    state: () => later('ready' as const),
    video: async (_id, request) => {
      if (options.screenFails) throw new Error('no screen');
      expect(request).toMatchObject({ accountId: expect.stringMatching(/^acct-/), fps: 15, kbps: 2000 });
      return later<ScreenVideo>({ start: () => undefined, keyframe: () => undefined, input: () => undefined, close: () => undefined });
    },
  });
  const open: StreamRequest[] = [];
  const closed: string[] = [];
  const streamer = strictFake<DesktopStreamer>('DesktopStreamer', {
    open: async (request) => {
      await later(null);
      await request.openVideo({ fps: 15, kbps: 2000 }, { onRtp: () => undefined, onSize: () => undefined, onEnded: () => undefined });
      open.push(request);
      return { answerSdp: 'v=0\r\n', close: (reason) => closed.push(reason) };
    },
  });
  const desktops = new Desktops(store, instanceStore, strictFake<Instances>('Instances', {}), display, streamer, null, { now: () => new Date() });
  return { desktops, session, open, closed };
}

test(`20 offers at once from one account open ${VIDEO_STREAMS_PER_ACCOUNT} streams; the rest are 409 D07; another account is not held back`, async () => {
  const { desktops, session, open } = setup();
  const ids = Array.from({ length: 20 }, (_, n) => session('acct-a', `s-${n}`).id);
  const outcomes = await Promise.allSettled(ids.map((id) => desktops.offer('acct-a', id, OFFER)));
  const answered = outcomes.filter((o) => o.status === 'fulfilled');
  const refused = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason as KisteError] : []));
  expect(answered).toHaveLength(VIDEO_STREAMS_PER_ACCOUNT);
  expect(refused.map((e) => e.code)).toEqual(Array(20 - VIDEO_STREAMS_PER_ACCOUNT).fill('D07'));
  expect(open).toHaveLength(VIDEO_STREAMS_PER_ACCOUNT); // the refused ones connected nothing
  expect(desktops.videoStreams('acct-a')).toBe(VIDEO_STREAMS_PER_ACCOUNT);

  await expect(desktops.offer('acct-b', session('acct-b', 'other').id, OFFER)).resolves.toBe('v=0\r\n');
});

test('a reconnect replaces its own stream within the cap; an ended session frees its slot', async () => {
  const { desktops, session, closed } = setup();
  const ids = Array.from({ length: VIDEO_STREAMS_PER_ACCOUNT }, (_, n) => session('acct-a', `s-${n}`).id);
  await Promise.all(ids.map((id) => desktops.offer('acct-a', id, OFFER)));
  // Full: the same viewer offering again is a reconnect, not a ninth stream.
  await desktops.offer('acct-a', ids[0]!, OFFER);
  expect(closed).toEqual(['replaced by a new stream']);
  expect(desktops.videoStreams('acct-a')).toBe(VIDEO_STREAMS_PER_ACCOUNT);
  // A session of another account cannot be used to close this account's streams.
  await expect(desktops.offer('acct-b', ids[1]!, OFFER)).rejects.toMatchObject({ code: 'D02' });
  expect(closed).toHaveLength(1);

  const extra = session('acct-a', 'extra').id;
  await expect(desktops.offer('acct-a', extra, OFFER)).rejects.toMatchObject({ code: 'D07' });
  await desktops.endSession('acct-a', ids[2]!);
  expect(desktops.videoStreams('acct-a')).toBe(VIDEO_STREAMS_PER_ACCOUNT - 1);
  await expect(desktops.offer('acct-a', extra, OFFER)).resolves.toBe('v=0\r\n');
});

test('offers that fail give their slots back', async () => {
  const { desktops, session } = setup({ screenFails: true });
  const ids = Array.from({ length: 12 }, (_, n) => session('acct-a', `s-${n}`).id);
  const outcomes = await Promise.allSettled(ids.map((id) => desktops.offer('acct-a', id, OFFER)));
  const codes = outcomes.map((o) => (o.status === 'rejected' ? (o.reason as KisteError).code : 'ok'));
  expect(codes.filter((c) => c === 'D03')).toHaveLength(VIDEO_STREAMS_PER_ACCOUNT);
  expect(codes.filter((c) => c === 'D07')).toHaveLength(12 - VIDEO_STREAMS_PER_ACCOUNT);
  expect(desktops.videoStreams('acct-a')).toBe(0);
  // unknown sessions too
  await expect(desktops.offer('acct-a', 'nope', OFFER)).rejects.toMatchObject({ code: 'D02' });
  expect(desktops.videoStreams('acct-a')).toBe(0);
});
