// The machines' network rules, loaded into the host's real nftables and tried by a process running
// as a jail user (setpriv), as a machine's QEMU runs: the host's loopback and own addresses are
// never reachable, special ranges only when allowed, the resolvers on port 53 only, and nothing at
// all with egress off. The rule text itself is checked too (sets from src/net/special-addresses).
import { execFile } from 'node:child_process';
import { lookup } from 'node:dns/promises';
import { createServer, type Server } from 'node:net';
import { networkInterfaces } from 'node:os';
import { egressRuleset, resolversOf, type EgressSettings } from '../../src/compute/jail/egress-rules';
import { HostFirewall } from '../../src/compute/jail/host-firewall';
import { classifyAddress, parseCidr } from '../../src/net/special-addresses';
import { testUidBase } from '../support/jail';

jest.setTimeout(120_000);

/** Connects to host:port as `uid` (a fresh node process); 'open' or the error code. */
function connectAs(uid: number, gid: number, host: string, port: number): Promise<string> {
  const script = `const s=require('net').connect(${port},${JSON.stringify(host)});s.setTimeout(2500,()=>{console.log('timeout');process.exit()});s.on('connect',()=>{console.log('open');process.exit()});s.on('error',(e)=>{console.log(e.code);process.exit()})`;
  return new Promise((resolve, reject) => {
    execFile('setpriv', [`--reuid=${uid}`, `--regid=${gid}`, '--clear-groups', '--', process.execPath, '-e', script], (error, stdout) =>
      error ? reject(error) : resolve(stdout.trim()),
    );
  });
}

describe('egress rules (text)', () => {
  const base: EgressSettings = { table: 'kiste_t', uids: { first: 10, last: 20 }, mode: 'public', allow: [], resolvers: ['10.255.255.53', 'fd00::53'] };

  it('matches only the jail uids and drops the host, special ranges and non-global IPv6', () => {
    const text = egressRuleset({ ...base, allow: [parseCidr('198.51.100.7')!] });
    expect(text).toContain('meta skuid 10-20 jump machines');
    expect(text).toMatch(/set resolvers4 \{[^}]*elements = \{ 10\.255\.255\.53 \}/);
    expect(text).toMatch(/set resolvers6 \{[^}]*elements = \{ fd00::53 \}/);
    expect(text).toMatch(/set allowed4 \{[^}]*elements = \{ 198\.51\.100\.7\/32 \}/);
    for (const cidr of ['10.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '100.64.0.0/10', '172.16.0.0/12', '192.168.0.0/16']) expect(text).toContain(cidr);
    // NAT64 of a private IPv4 range is refused like the range itself
    expect(text).toContain('64:ff9b:0:0:0:0:a00:0/104');
    const order = ['@resolvers4', 'fib daddr type', '@allowed4', '@special4', 'ip6 daddr != 2000::/3'].map((part) => text.indexOf(part));
    expect(order).toEqual([...order].sort((a, b) => a - b)); // resolvers, then never the host, then allowed, then special
  });

  it('drops everything of the jail users when egress is off', () => {
    const text = egressRuleset({ ...base, mode: 'off', allow: [parseCidr('198.51.100.7')!] });
    expect(text).toMatch(/chain machines \{\n\s+counter drop\n\s+\}/);
    expect(text).not.toContain('@allowed4 accept');
  });

  it('reads the nameservers of a resolv.conf', () => {
    expect(resolversOf('# x\nnameserver 127.0.0.53\noptions edns0\nnameserver fe80::1%eth0\nnameserver 10.0.0.2\nnameserver 10.0.0.2\n')).toEqual(['127.0.0.53', 'fe80::1', '10.0.0.2']);
  });
});

describe('egress rules in the host firewall, tried as a jail user', () => {
  const uidBase = testUidBase();
  const uid = uidBase + 7;
  const other = { uid: 4242 }; // not a jail user: never filtered
  let listener: Server;
  let port: number;
  let connections = 0;
  let mirror: { host: string; address: string; special: boolean } | undefined;
  const firewalls: HostFirewall[] = [];

  const firewall = (settings: Partial<EgressSettings>): HostFirewall => {
    const made = new HostFirewall({ table: `kiste_${uidBase}`, uids: { first: uidBase + 1, last: uidBase + 65_535 }, mode: 'public', allow: [], resolvers: [], ...settings });
    firewalls.push(made);
    return made;
  };
  const hostAddress = Object.values(networkInterfaces()).flat().find((a) => a && !a.internal && a.family === 'IPv4')?.address;

  beforeAll(async () => {
    listener = createServer((socket) => {
      connections++;
      socket.end();
    });
    await new Promise<void>((resolve) => listener.listen(0, '0.0.0.0', resolve));
    port = (listener.address() as { port: number }).port;
    // The package mirror: a public host where the machine's network reaches one, on this host at a
    // documentation address (it is then allowed explicitly, as an operator of such a network would).
    const found = await lookup('deb.debian.org', { family: 4 }).catch(() => undefined);
    if (found) mirror = { host: 'deb.debian.org', address: found.address, special: !classifyAddress(found.address).public };
  });

  afterAll(async () => {
    await firewalls[0]?.unload();
    listener.close();
  });

  it('never reaches the host: loopback, its own addresses', async () => {
    await firewall({}).load();
    expect(await connectAs(other.uid, other.uid, '127.0.0.1', port)).toBe('open'); // a control: the listener answers others
    const before = connections;
    expect(await connectAs(uid, uidBase, '127.0.0.1', port)).toBe('timeout');
    if (hostAddress) expect(await connectAs(uid, uidBase, hostAddress, port)).toBe('timeout');
    expect(await connectAs(uid, uidBase, '169.254.169.254', 80)).toBe('timeout');
    expect(connections).toBe(before);
  });

  it('reaches an allowed range through the host, but never the host even when allowed', async () => {
    expect(mirror).toBeDefined();
    const allow = [parseCidr(mirror!.address)!, parseCidr('127.0.0.0/8')!, ...(hostAddress ? [parseCidr(hostAddress)!] : [])];
    await firewall({ allow }).load();
    expect(await connectAs(uid, uidBase, mirror!.address, 80)).toBe('open');
    expect(await connectAs(uid, uidBase, '127.0.0.1', port)).toBe('timeout');
    if (hostAddress) expect(await connectAs(uid, uidBase, hostAddress, port)).toBe('timeout');
  });

  it('refuses the mirror when it sits in a special range and is not allowed', async () => {
    await firewall({}).load();
    expect(await connectAs(uid, uidBase, mirror!.address, 80)).toBe(mirror!.special ? 'timeout' : 'open');
  });

  it('reaches nothing with egress off', async () => {
    await firewall({ mode: 'off', allow: [parseCidr(mirror!.address)!] }).load();
    expect(await connectAs(uid, uidBase, mirror!.address, 80)).toBe('timeout');
    expect(await connectAs(other.uid, other.uid, mirror!.address, 80)).toBe('open'); // only the jail users are cut off
  });
});
