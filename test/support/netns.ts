// A private network the host reaches and nothing else does: a network namespace behind a veth pair,
// with a /30 of its own. Tests run servers in it to stand for a host on a private network.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';

export interface PrivateNetwork {
  /** The namespace's name (`ip netns exec <namespace> …`). */
  namespace: string;
  /** The host side's link: `ip link set <hostLink> down` cuts the namespace off. */
  hostLink: string;
  /** The namespace's address (the host side has the one before it). */
  address: string;
  /** The /30 both ends are in. */
  cidr: string;
  /** Starts a program inside the namespace; it is killed on close(). */
  spawn(argv: string[]): ChildProcess;
  close(): void;
}

/** `tag` names the namespace and links (a few letters); `octet2` picks 172.<octet2>.x.0/30. */
export function privateNetwork(tag: string, octet2: number): PrivateNetwork {
  const id = randomBytes(2).toString('hex');
  const ns = `kiste-${tag}-${id}`;
  const subnet = `172.${octet2}.${parseInt(id, 16) % 250}`;
  const host = `k${tag}${id}h`;
  const sh = (...args: string[]) => execFileSync('ip', args, { stdio: 'pipe' });
  sh('netns', 'add', ns);
  sh('link', 'add', host, 'type', 'veth', 'peer', 'name', `k${tag}${id}n`, 'netns', ns);
  sh('addr', 'add', `${subnet}.1/30`, 'dev', host);
  sh('link', 'set', host, 'up');
  sh('-n', ns, 'addr', 'add', `${subnet}.2/30`, 'dev', `k${tag}${id}n`);
  sh('-n', ns, 'link', 'set', `k${tag}${id}n`, 'up');
  sh('-n', ns, 'link', 'set', 'lo', 'up');
  const children: ChildProcess[] = [];
  return {
    namespace: ns,
    hostLink: host,
    address: `${subnet}.2`,
    cidr: `${subnet}.0/30`,
    spawn(argv) {
      const child = spawn('ip', ['netns', 'exec', ns, ...argv], { stdio: 'ignore' });
      children.push(child);
      return child;
    },
    close() {
      for (const child of children) child.kill();
      try {
        sh('link', 'del', host);
      } catch {
        // gone with the namespace
      }
      sh('netns', 'del', ns);
    },
  };
}
