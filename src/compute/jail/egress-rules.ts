// What a machine's network traffic may reach, as one nftables table. Pure: settings in, ruleset
// text out (host-firewall.ts loads it).
//
// Why this mechanism: every machine's QEMU runs as a jail user of its own (a uid in one range, see
// machine-users.ts), and its user-mode network (slirp) opens ordinary host sockets as that user. So
// one output-hook chain that matches the socket owner's uid covers every machine, whatever its
// guest does, and also a QEMU that has been taken over. It needs no bridge, no forwarding sysctl
// and no per-machine network set-up, and slirp's connection state is part of a memory session, so
// connections survive stop and resume. slirp maps its gateway 10.0.2.2 to the host's loopback and
// QEMU 7.2 has no switch to turn that off; these rules make the mapping lead nowhere.
//
// For the packets of a jail user's sockets, in order:
//   egress off                                   drop everything
//   to the host's resolvers, port 53 (UDP, TCP)  accept: slirp forwards the guest's DNS (10.0.2.3)
//                                                to them, even when they sit on loopback or a
//                                                private address
//   to an address of this host (any interface,   drop: never the host's own services
//   loopback, broadcast, multicast)
//   to the operator's allowed CIDRs              accept (KISTE_MACHINE_EGRESS_ALLOW)
//   to a special range (src/net/special-          drop: RFC 1918, CGNAT, link-local and metadata,
//   addresses.ts), or IPv6 outside 2000::/3      unique-local, documentation, multicast …
//   anything else                                accept: the public internet
// Dropped, not rejected: a reject in the output hook reaches no local socket (measured), so a
// guest's connection simply times out. Other machines are unreachable because no machine listens
// on the host: remote access goes through the agent, never through a published port.
import { specialRanges, type Cidr } from '../../net/special-addresses';

export type EgressMode = 'public' | 'off';

export interface EgressSettings {
  /** nftables table name (family inet). */
  table: string;
  /** Jail uids, inclusive. */
  uids: { first: number; last: number };
  mode: EgressMode;
  /** Reached like public addresses, after the host's own addresses are refused. */
  allow: Cidr[];
  /** The host's DNS resolvers (from /etc/resolv.conf). */
  resolvers: string[];
}

/** The nftables table (family inet) of the installation whose jail uids start at uidBase. */
export function egressTable(uidBase: number): string {
  return `kiste_${uidBase}`;
}

export function egressRuleset(settings: EgressSettings): string {
  const special = specialRanges();
  const byFamily = (family: 4 | 6, cidrs: string[]) => cidrs.filter((cidr) => cidr.includes(':') === (family === 6));
  const allowed = settings.allow.map((cidr) => cidr.cidr);
  const set = (name: string, type: string, elements: string[]) =>
    `  set ${name} {\n    type ${type}; flags interval; auto-merge;\n${elements.length ? `    elements = { ${elements.join(', ')} }\n` : ''}  }`;
  const rules: string[] = [];
  if (settings.mode === 'off') {
    rules.push('counter drop');
  } else {
    rules.push(
      'ip daddr @resolvers4 meta l4proto { tcp, udp } th dport 53 accept',
      'ip6 daddr @resolvers6 meta l4proto { tcp, udp } th dport 53 accept',
      'fib daddr type { local, broadcast, anycast, multicast } counter drop',
      'ip daddr @allowed4 accept',
      'ip6 daddr @allowed6 accept',
      'ip daddr @special4 counter drop',
      'ip6 daddr != 2000::/3 counter drop',
      'ip6 daddr @special6 counter drop',
    );
  }
  const table = `inet ${settings.table}`;
  return [
    // Declaring the table first makes the delete succeed whether or not it exists: the whole file
    // is one transaction, so the old rules stay until the new ones are in.
    `table ${table} {}`,
    `delete table ${table}`,
    `table ${table} {`,
    set('resolvers4', 'ipv4_addr', byFamily(4, settings.resolvers)),
    set('resolvers6', 'ipv6_addr', byFamily(6, settings.resolvers)),
    set('allowed4', 'ipv4_addr', byFamily(4, allowed)),
    set('allowed6', 'ipv6_addr', byFamily(6, allowed)),
    set('special4', 'ipv4_addr', special.ipv4),
    set('special6', 'ipv6_addr', special.ipv6),
    // Only packets of a jail user's socket jump to the machine rules: packets the kernel sends
    // without a socket (TCP resets, ICMP errors, neighbour discovery) never match skuid.
    '  chain output {',
    '    type filter hook output priority filter; policy accept;',
    `    meta skuid ${settings.uids.first}-${settings.uids.last} jump machines`,
    '  }',
    '  chain machines {',
    ...rules.map((rule) => `    ${rule}`),
    '  }',
    '}',
    '',
  ].join('\n');
}

/** The nameservers of a resolv.conf (IPv4 and IPv6 addresses; a zone index is dropped). */
export function resolversOf(resolvConf: string): string[] {
  const found = new Set<string>();
  for (const line of resolvConf.split('\n')) {
    const match = /^\s*nameserver\s+([0-9a-fA-F:.]+)(?:%\S+)?\s*$/.exec(line);
    if (match) found.add(match[1]!);
  }
  return [...found];
}
