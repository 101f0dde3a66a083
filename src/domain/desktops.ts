// Desktop links and the viewer's desktop sessions (spec "Desktop").
//
// A link is a reusable reference to one instance's desktop (stored hashed, 60 s to 7 days): it
// opens only for a caller signed in to the same account. The viewer exchanges it for a desktop
// session of its own (24 hours, independent of the link: revoking links stops new viewers, open
// ones keep running) and renews that session after a reload. A session carries a short-lived
// authorization for the recovery console, a plain RFB view of the machine's screen. Streams that
// are open for a session end with it, and signing out everywhere ends every session.
import type { Duplex } from 'node:stream';
import { KisteError } from '../errors';
import { AccountSlots } from './account-slots';
import type { DisplayState, MachineDisplay } from '../compute/machine-display';
import { OfferRejectedError, type DesktopStreamer } from '../media/desktop-streamer';
import { iceServers, type IceServer } from './ice-servers';
import type { DesktopLink, DesktopSession, DesktopStore } from '../store/desktop';
import type { InstanceStore } from '../store/instances';
import type { Clock } from './clock';
import type { Instances } from './instances';
import { newId, newToken, sha256Hex } from './secrets';

export const DESKTOP_LINK_PREFIX = 'kiste_dsk_';
export const RECOVERY_TOKEN_PREFIX = 'kiste_rec_';
export const LINK_TTL = { defaultSeconds: 3600, minSeconds: 60, maxSeconds: 604_800 } as const;
export const DESKTOP_SESSION_MS = 24 * 3600_000;
/** How long a recovery authorization may wait to be used (each open of the console needs a fresh one). */
export const RECOVERY_TOKEN_MS = 60_000;

/** Something streaming for a session (a recovery console, a WebRTC peer): closed when the session ends. */
export interface DesktopStream {
  close(reason: string): void;
  /** A video stream (each has an encoder of its own); recovery consoles only relay bytes. */
  video?: boolean;
  /** Called once when the stream is no longer tracked (it closed, or its session ended). */
  onForgotten?(): void;
}

/** Video streams an account may have open at once (each runs an encoder on the host). */
export const VIDEO_STREAMS_PER_ACCOUNT = 8;

export interface OpenedDesktopSession {
  session: DesktopSession;
  recoveryToken: string;
  recoveryExpiresAt: Date;
}

interface RecoveryGrant {
  sessionId: string;
  accountId: string;
  expiresAt: number;
}

export class Desktops {
  private readonly recoveryGrants = new Map<string, RecoveryGrant>();
  /** Per session: its account and what streams for it now. */
  private readonly streams = new Map<string, { accountId: string; instanceId: string; open: Set<DesktopStream> }>();
  /** Video streams per account, each held from the start of its offer until the stream ends. */
  private readonly videoSlots = new AccountSlots(VIDEO_STREAMS_PER_ACCOUNT);

  constructor(
    private readonly store: DesktopStore,
    private readonly instanceStore: InstanceStore,
    private readonly instances: Instances,
    private readonly display: MachineDisplay,
    private readonly streamer: DesktopStreamer,
    private readonly turn: { urls: string[]; secret: string } | null,
    private readonly clock: Clock,
  ) {}

  /** The ICE servers a session's viewer gets now (an operator's TURN server, with credentials good for minutes: renew for fresh ones). */
  iceServers(session: DesktopSession): IceServer[] {
    return iceServers(this.turn, session.id, this.clock.now(), session.expiresAt);
  }

  /** A new link to the instance's desktop (whatever its state: stop and resume keep links). */
  async createLink(accountId: string, name: string, ttlSeconds: number | null | undefined): Promise<{ reference: string; link: DesktopLink }> {
    const ttl = ttlSeconds ?? LINK_TTL.defaultSeconds;
    if (!Number.isInteger(ttl) || ttl < LINK_TTL.minSeconds || ttl > LINK_TTL.maxSeconds) {
      throw new KisteError('P01', { message: `ttl_seconds must be ${LINK_TTL.minSeconds} to ${LINK_TTL.maxSeconds}`, param: 'ttl_seconds' });
    }
    const instance = await this.instances.get(accountId, name);
    const now = this.clock.now();
    const reference = newToken(DESKTOP_LINK_PREFIX);
    const link = await this.store.createLink({
      id: newId(),
      accountId,
      instanceId: instance.id,
      tokenHash: sha256Hex(reference),
      createdAt: now,
      expiresAt: new Date(now.getTime() + ttl * 1000),
    });
    return { reference, link };
  }

  /** Revokes the instance's live links (open desktops keep running); how many were revoked. */
  async revokeLinks(accountId: string, name: string): Promise<number> {
    const instance = await this.instances.get(accountId, name);
    return this.store.revokeLinks(accountId, instance.id, this.clock.now());
  }

  /** Resolves when the instance behind the link can stream its desktop; else the reason (D01, K03, D06, D03). */
  async preflight(accountId: string, reference: string): Promise<void> {
    const link = await this.liveLink(accountId, reference);
    await this.streamableInstance(link.instanceId);
  }

  /** The running instance whose desktop is up; else why not (D01, K03, D06, D03). */
  private async streamableInstance(instanceId: string): Promise<string> {
    const id = await this.runningInstanceId(instanceId);
    const state: DisplayState = await this.display.state(id);
    if (state === 'none') throw new KisteError('D06');
    if (state === 'stopped') throw new KisteError('K03', { message: 'The instance is not running' });
    if (state === 'starting') throw new KisteError('D03');
    return id;
  }

  /** Exchanges a live link for a desktop session of the caller's own (the link stays usable). */
  async openSession(accountId: string, credentialId: string, reference: string): Promise<OpenedDesktopSession> {
    const link = await this.liveLink(accountId, reference);
    await this.existingInstance(link.instanceId);
    const now = this.clock.now();
    const session = await this.store.createSession({
      id: newId(),
      accountId,
      instanceId: link.instanceId,
      linkId: link.id,
      credentialId,
      createdAt: now,
      expiresAt: new Date(now.getTime() + DESKTOP_SESSION_MS),
    });
    return this.withRecoveryGrant(session);
  }

  /**
   * After a reload: the session this credential opened from this link, with a fresh recovery
   * authorization. Works after the link expired or was revoked (the session is the viewer's own).
   */
  async renewSession(accountId: string, credentialId: string, reference: string): Promise<OpenedDesktopSession> {
    const link = await this.store.findLink(sha256Hex(reference));
    if (!link || link.accountId !== accountId) throw new KisteError('D01');
    const session = await this.store.findSessionOf(accountId, link.id, credentialId, this.clock.now());
    if (!session) throw new KisteError('D02');
    return this.withRecoveryGrant(session);
  }

  /** Ends the session and whatever streams for it; D02 when it is unknown or already ended. */
  async endSession(accountId: string, sessionId: string): Promise<void> {
    if (!(await this.store.endSession(accountId, sessionId, this.clock.now()))) throw new KisteError('D02');
    this.closeStreams(sessionId, 'the desktop session ended');
  }

  /**
   * Answers a viewer's WebRTC offer: the machine's screen streams to it from now on, until the
   * viewer leaves, the machine stops or the session ends.
   */
  async offer(accountId: string, sessionId: string, offerSdp: string): Promise<string> {
    // An offer that cannot carry the screen is refused before anything is connected.
    if (!/^v=0\r?\n/.test(offerSdp) || !/\nm=video /.test(offerSdp)) {
      throw new KisteError('P01', { message: 'sdp must be an SDP offer (v=0 …) with a video section to receive the screen on', param: 'sdp' });
    }
    // A viewer that offers again (a reconnect) replaces its stream: the old one goes first, so its
    // slot is free for the new one. Then the new one's slot is taken before anything is awaited.
    this.closeStreams(sessionId, 'replaced by a new stream', (stream) => stream.video === true, accountId);
    const slot = this.videoSlots.take(accountId, () => new KisteError('D07', { message: `The account already has ${VIDEO_STREAMS_PER_ACCOUNT} desktop streams open` }));
    let tracked = false;
    try {
      const session = await this.session(accountId, sessionId);
      const instanceId = await this.streamableInstance(session.instanceId);
      // A stream that ends before it is tracked must not be tracked (its slot would stay taken).
      let endedEarly = false;
      let untrack: () => void = () => {
        endedEarly = true;
      };
      try {
        const stream = await this.streamer.open({
          offerSdp,
          iceServers: this.iceServers(session),
          // Encoded where the machine runs, in the account's share of that host's encoders.
          openVideo: (quality, events) => this.display.video(instanceId, { accountId, ...quality }, events),
          resize: (size) => this.display.resize(instanceId, size),
          clipboard: { read: () => this.display.readClipboard(instanceId), write: (text) => this.display.writeClipboard(instanceId, text) },
          onEnded: () => untrack(),
        });
        if (endedEarly) throw new Error('the stream ended as it was answered');
        untrack = this.track(session, { close: (reason) => stream.close(reason), video: true, onForgotten: () => slot.release() });
        tracked = true;
        return stream.answerSdp;
      } catch (error) {
        if (error instanceof OfferRejectedError) throw new KisteError('P01', { message: error.message, param: 'sdp' });
        // The screen's handshake or the encoder failed: the machine may be stopping or its display restarting.
        throw new KisteError('D03', { message: `The desktop cannot stream now (${error instanceof Error ? error.message : String(error)})` });
      }
    } finally {
      if (!tracked) slot.release();
    }
  }

  /** Video streams the account has open or being opened. */
  videoStreams(accountId: string): number {
    return this.videoSlots.count(accountId);
  }

  /** A live session of the account (D02 otherwise). */
  async session(accountId: string, sessionId: string): Promise<DesktopSession> {
    const session = await this.store.findSession(accountId, sessionId, this.clock.now());
    if (!session) throw new KisteError('D02');
    return session;
  }

  /**
   * Opens the recovery console of a session with its short-lived authorization: an RFB stream of
   * the machine's screen. The caller registers its transport with `track`.
   */
  async openRecovery(sessionId: string, token: string): Promise<{ session: DesktopSession; rfb: Duplex }> {
    const grant = this.recoveryGrants.get(sha256Hex(token));
    if (!grant || grant.sessionId !== sessionId || grant.expiresAt <= this.clock.now().getTime()) throw new KisteError('D05');
    const session = await this.session(grant.accountId, sessionId);
    const instanceId = await this.runningInstanceId(session.instanceId);
    try {
      return { session, rfb: await this.display.connect(instanceId) };
    } catch (error) {
      // Only now ask why (the state costs a look into the guest, which a console that opens need not pay).
      if ((await this.display.state(instanceId)) === 'none') throw new KisteError('D06');
      throw new KisteError('K03', { message: `The instance's screen cannot be reached now (${error instanceof Error ? error.message : String(error)})` });
    }
  }

  /** Registers a stream of a session: it is closed when the session ends; call the result when it closed by itself. */
  track(session: DesktopSession, stream: DesktopStream): () => void {
    let entry = this.streams.get(session.id);
    if (!entry) this.streams.set(session.id, (entry = { accountId: session.accountId, instanceId: session.instanceId, open: new Set() }));
    entry.open.add(stream);
    return () => this.forget(session.id, stream);
  }

  /** Machines with a desktop or recovery console open through this process. */
  machinesInUse(): string[] {
    return [...this.streams.values()].map((entry) => entry.instanceId);
  }

  /** Signing out everywhere ends the account's desktop sessions and closes open desktops. */
  async closeAccount(accountId: string): Promise<void> {
    await this.store.endAccountSessions(accountId, this.clock.now());
    for (const [token, grant] of this.recoveryGrants) if (grant.accountId === accountId) this.recoveryGrants.delete(token);
    for (const [sessionId, entry] of [...this.streams]) if (entry.accountId === accountId) this.closeStreams(sessionId, 'signed out everywhere');
  }

  /** For shutdown. */
  closeAll(): void {
    for (const sessionId of [...this.streams.keys()]) this.closeStreams(sessionId, 'the service is stopping');
  }

  /** Closes the session's streams (those `which` picks; all by default), when it is `accountId`'s (if given). */
  private closeStreams(sessionId: string, reason: string, which: (stream: DesktopStream) => boolean = () => true, accountId?: string): void {
    const entry = this.streams.get(sessionId);
    if (!entry || (accountId !== undefined && entry.accountId !== accountId)) return;
    for (const stream of [...entry.open].filter(which)) {
      this.forget(sessionId, stream);
      stream.close(reason);
    }
  }

  /** A stream of the session is no longer open (the session's entry goes with its last one). */
  private forget(sessionId: string, stream: DesktopStream): void {
    const entry = this.streams.get(sessionId);
    if (!entry?.open.delete(stream)) return;
    if (entry.open.size === 0) this.streams.delete(sessionId);
    stream.onForgotten?.();
  }

  private withRecoveryGrant(session: DesktopSession): OpenedDesktopSession {
    const now = this.clock.now().getTime();
    for (const [token, grant] of this.recoveryGrants) if (grant.expiresAt <= now) this.recoveryGrants.delete(token);
    const recoveryToken = newToken(RECOVERY_TOKEN_PREFIX);
    const expiresAt = now + RECOVERY_TOKEN_MS;
    this.recoveryGrants.set(sha256Hex(recoveryToken), { sessionId: session.id, accountId: session.accountId, expiresAt });
    return { session, recoveryToken, recoveryExpiresAt: new Date(expiresAt) };
  }

  /** The link behind a reference when it is live and the caller's; one answer (D01) for every other case. */
  private async liveLink(accountId: string, reference: string): Promise<DesktopLink> {
    const link = await this.store.findLink(sha256Hex(reference));
    const now = this.clock.now();
    if (!link || link.accountId !== accountId || link.revokedAt || link.expiresAt <= now) throw new KisteError('D01');
    return link;
  }

  private async existingInstance(instanceId: string) {
    const instance = await this.instanceStore.findById(instanceId);
    // Links go with their instance (cascade); one being deleted opens nothing either.
    if (!instance || instance.status === 'deleting') throw new KisteError('D01');
    return instance;
  }

  private async runningInstanceId(instanceId: string): Promise<string> {
    const instance = await this.existingInstance(instanceId);
    if (instance.status !== 'running') throw new KisteError('K03', { message: `Instance ${instance.name} is ${instance.status}, not running` });
    return instance.id;
  }
}
