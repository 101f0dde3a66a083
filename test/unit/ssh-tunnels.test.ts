// SshTunnels rules with the guest side injected (a PassThrough for the agent's TCP stream, an
// agent that refuses the connection): K04 when sshd does not accept, the per-account limit counts
// openings under way, idle and sign-out closes, and bytes flow both ways with backpressure.
import { Duplex, PassThrough } from 'node:stream';
import { AgentCallError } from '../../src/compute/agent-client';
import type { GuestAgents } from '../../src/compute/machine-host';
import type { Instances } from '../../src/domain/instances';
import { SshTunnels, type TunnelEnd, type TunnelPeer } from '../../src/domain/ssh-tunnels';
import { KisteError } from '../../src/errors';

function setup(openTcp: () => Promise<Duplex>, settings = { perAccount: 2, idleMs: 60_000 }) {
  const instance = { id: 'i-1', name: 'box', guestHostname: 'box' };
  const instances = {
    running: async () => instance,
    refreshAuthorizedKeys: async () => undefined,
  } as unknown as Instances;
  const host = { agent: () => ({ openTcp }) } as unknown as GuestAgents;
  return new SshTunnels(instances, host, settings);
}

function peer() {
  const received: Buffer[] = [];
  let ended: TunnelEnd | null = null;
  let full = false;
  let drain: (() => void) | null = null;
  const p: TunnelPeer = {
    send: (chunk) => (received.push(chunk), !full),
    onDrain: (resume) => (drain = resume),
    close: (end) => (ended = end),
  };
  return { p, received, ended: () => ended, setFull: (v: boolean) => (full = v), drain: () => drain?.() };
}

describe('SshTunnels', () => {
  test('a guest that refuses port 22 is 409 K04', async () => {
    const tunnels = setup(async () => {
      throw new AgentCallError('connect_failed', 'connect ECONNREFUSED 127.0.0.1:22');
    });
    const error = await tunnels.connect('a', 'box').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(KisteError);
    expect((error as KisteError).code).toBe('K04');
    expect(tunnels.count('a')).toBe(0);
  });

  test('an agent that does not answer is 409 K04 too (retryable), and frees the slot', async () => {
    const tunnels = setup(async () => {
      throw new AgentCallError('disconnected', 'agent connection lost');
    });
    const error = await tunnels.connect('a', 'box').catch((e: unknown) => e);
    expect((error as KisteError).code).toBe('K04');
    expect((error as KisteError).message).toMatch(/agent connection lost/);
    expect(tunnels.count('a')).toBe(0);
  });

  test('openings under way count against the limit; closed ones free it', async () => {
    let release: (() => void) | null = null;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const tunnels = setup(async () => {
      await gate;
      return new PassThrough();
    });
    const first = tunnels.connect('a', 'box');
    const second = tunnels.connect('a', 'box');
    await new Promise((resolve) => setImmediate(resolve));
    const third = await tunnels.connect('a', 'box').catch((e: unknown) => e);
    expect((third as KisteError).code).toBe('L07');
    expect(tunnels.count('b')).toBe(0); // other accounts are not affected
    release!();
    const [one] = await Promise.all([first, second]);
    expect(tunnels.count('a')).toBe(2);
    one.close('guest_closed');
    expect(tunnels.count('a')).toBe(1);
    tunnels.closeAccount('a');
    expect(tunnels.count('a')).toBe(0);
  });

  test('bytes both ways with backpressure; idle closes', async () => {
    jest.useFakeTimers();
    try {
      const guest = new PassThrough();
      const tunnels = setup(async () => guest, { perAccount: 2, idleMs: 1000 });
      const tunnel = await tunnels.connect('a', 'box');
      const client = peer();
      tunnel.attach(client.p);
      guest.write('SSH-2.0-OpenSSH\r\n');
      await Promise.resolve();
      expect(Buffer.concat(client.received).toString()).toBe('SSH-2.0-OpenSSH\r\n');
      client.setFull(true);
      guest.write('more');
      expect(guest.isPaused()).toBe(true); // the slow client holds the guest side
      client.setFull(false);
      client.drain();
      expect(guest.isPaused()).toBe(false);

      const taken = jest.fn();
      tunnel.write(Buffer.from('client hello'), taken);
      expect(taken).toHaveBeenCalled();

      jest.advanceTimersByTime(999);
      expect(client.ended()).toBeNull();
      jest.advanceTimersByTime(2);
      expect(client.ended()).toBe('idle');
      expect(guest.destroyed).toBe(true);
      expect(tunnels.count('a')).toBe(0);
    } finally {
      jest.useRealTimers();
    }
  });
});
