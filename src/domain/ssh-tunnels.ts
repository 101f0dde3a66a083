// SSH tunnels: a byte stream to the guest's OpenSSH server (through the agent's tcp.open), carried
// by whatever transport the caller attaches (the HTTP layer attaches a WebSocket). The rules live
// here: running instance (K03), SSH listening (K04), 32 open per account (L07), one hour idle,
// closed when the machine stops or is deleted (its agent link ends) and when the account signs
// out everywhere. Device keys changed since the machine started are given to it at each opening.
import type { Duplex } from 'node:stream';
import { KisteError } from '../errors';
import { AgentCallError } from '../compute/guest-agent';
import { cameFromUnreachableHost, type GuestAgents } from '../compute/machine-host';
import { AccountSlots } from './account-slots';
import type { Instances } from './instances';

export const TUNNELS_PER_ACCOUNT = 32;
export const TUNNEL_IDLE_MS = 60 * 60 * 1000;
const SSH_PORT = 22;

/** Why a tunnel was closed by the service (the transport turns it into a close frame). */
export type TunnelEnd = 'idle' | 'signed_out' | 'guest_closed' | 'shutdown';

/** One side of a tunnel as the domain sees the transport. */
export interface TunnelPeer {
  /** Bytes from the guest; false = stop reading until onDrain. */
  send(chunk: Buffer): boolean;
  onDrain(resume: () => void): void;
  close(end: TunnelEnd, detail?: string): void;
}

export interface TunnelSettings {
  perAccount: number;
  idleMs: number;
}

export class SshTunnel {
  private idleTimer: NodeJS.Timeout | null = null;
  private peer: TunnelPeer | null = null;
  private closed = false;

  constructor(
    readonly accountId: string,
    readonly instanceId: string,
    private readonly stream: Duplex,
    private readonly idleMs: number,
    private readonly onClosed: (tunnel: SshTunnel) => void,
  ) {
    stream.on('error', () => this.close('guest_closed'));
    stream.on('close', () => this.close('guest_closed'));
    this.touch();
  }

  /** Connects the transport: guest bytes go to the peer (paused while it is full), peer bytes come through write(). */
  attach(peer: TunnelPeer): void {
    if (this.closed) return peer.close('guest_closed');
    this.peer = peer;
    peer.onDrain(() => this.stream.resume());
    this.stream.on('data', (chunk: Buffer) => {
      this.touch();
      if (!peer.send(chunk)) this.stream.pause();
    });
    this.stream.on('end', () => this.close('guest_closed'));
  }

  /** Bytes from the client; the callback runs once the guest side took them (backpressure to the transport). */
  write(chunk: Buffer, taken: () => void): void {
    if (this.closed) return;
    this.touch();
    if (this.stream.write(chunk)) taken();
    else this.stream.once('drain', taken);
  }

  /** The client went away (or the service closes it): the guest connection ends too. */
  close(end: TunnelEnd, detail?: string): void {
    if (this.closed) return;
    this.closed = true;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.stream.destroy();
    this.peer?.close(end, detail);
    this.onClosed(this);
  }

  private touch(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => this.close('idle', `no traffic for ${Math.round(this.idleMs / 60000)} minutes`), this.idleMs);
    this.idleTimer.unref();
  }
}

export class SshTunnels {
  private readonly open = new Map<string, Set<SshTunnel>>();
  /** Per account: a slot from the start of an opening until its tunnel closes (openings under way count too). */
  private readonly slots: AccountSlots;

  constructor(
    private readonly instances: Instances,
    private readonly host: GuestAgents,
    private readonly settings: TunnelSettings = { perAccount: TUNNELS_PER_ACCOUNT, idleMs: TUNNEL_IDLE_MS },
  ) {
    this.slots = new AccountSlots(settings.perAccount);
  }

  /** Checks the rules and connects to the guest's SSH port; the caller attaches its transport. */
  async connect(accountId: string, name: string): Promise<SshTunnel> {
    const slot = this.slots.take(accountId, () => new KisteError('L07', { message: `The account already has ${this.settings.perAccount} SSH tunnels open` }));
    try {
      const instance = await this.instances.running(accountId, name);
      let stream: Duplex;
      try {
        await this.instances.refreshAuthorizedKeys(instance);
        stream = await this.host.agent(instance.id).openTcp(SSH_PORT, undefined, { timeoutMs: 10_000 });
      } catch (error) {
        // sshd refused, or the guest's agent is not answering (the machine is still starting, or
        // going away): either way SSH is not reachable now, and a retry may succeed.
        if (error instanceof AgentCallError && !cameFromUnreachableHost(error)) {
          throw new KisteError('K04', { message: `Instance ${name}'s SSH server is not accepting connections now (${error.message})` });
        }
        throw error;
      }
      const tunnel = new SshTunnel(accountId, instance.id, stream, this.settings.idleMs, (t) => {
        this.forget(t);
        slot.release();
      });
      let set = this.open.get(accountId);
      if (!set) this.open.set(accountId, (set = new Set()));
      set.add(tunnel);
      return tunnel;
    } catch (error) {
      slot.release();
      throw error;
    }
  }

  /** The most tunnels one account may have open (GET /v1/status reports it). */
  get perAccount(): number {
    return this.settings.perAccount;
  }

  /** Open tunnels of the account (and openings under way). */
  count(accountId: string): number {
    return this.slots.count(accountId);
  }

  /** Machines with an SSH tunnel open through this process. */
  machinesInUse(): string[] {
    return [...this.open.values()].flatMap((tunnels) => [...tunnels].map((tunnel) => tunnel.instanceId));
  }

  /** Signing out everywhere ends the account's tunnels. */
  closeAccount(accountId: string): void {
    for (const tunnel of [...(this.open.get(accountId) ?? [])]) tunnel.close('signed_out');
  }

  /** For shutdown. */
  closeAll(): void {
    for (const set of [...this.open.values()]) for (const tunnel of [...set]) tunnel.close('shutdown');
  }

  private forget(tunnel: SshTunnel): void {
    const set = this.open.get(tunnel.accountId);
    set?.delete(tunnel);
    if (set?.size === 0) this.open.delete(tunnel.accountId);
  }
}
