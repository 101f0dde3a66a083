// The webhook URL rule without the service: the address classifier over many addresses of every
// refused range (and public ones beside them), the URL checks, and names resolved through an
// injected resolver (any one private answer refuses the name).
import { checkWebhookTarget, parseWebhookUrl, type Resolver } from '../../src/domain/webhook-target';
import { classifyAddress } from '../../src/net/special-addresses';
import { KisteError } from '../../src/errors';

const STRICT = { allowPrivate: false };
const UNSAFE = { allowPrivate: true };

describe('classifyAddress', () => {
  const refused: [string, RegExp][] = [
    // IPv4 loopback, "this network", RFC 1918, CGNAT, link-local / metadata
    ['127.0.0.1', /loopback/], ['127.255.255.254', /loopback/], ['127.1.2.3', /loopback/],
    ['0.0.0.0', /unspecified/], ['0.1.2.3', /unspecified/],
    ['10.0.0.1', /RFC 1918/], ['10.255.255.255', /RFC 1918/],
    ['172.16.0.1', /RFC 1918/], ['172.31.255.255', /RFC 1918/],
    ['192.168.0.1', /RFC 1918/], ['192.168.255.255', /RFC 1918/],
    ['100.64.0.1', /CGNAT/], ['100.127.255.255', /CGNAT/],
    ['169.254.169.254', /link-local/], ['169.254.0.1', /link-local/],
    // IETF, documentation, benchmarking, 6to4 relay, multicast, reserved, broadcast
    ['192.0.0.8', /IETF/], ['192.0.2.10', /documentation/], ['198.51.100.7', /documentation/], ['203.0.113.200', /documentation/],
    ['198.18.0.1', /benchmarking/], ['198.19.255.255', /benchmarking/], ['192.88.99.1', /6to4/],
    ['224.0.0.1', /multicast/], ['239.255.255.250', /multicast/], ['240.0.0.1', /reserved/], ['255.255.255.255', /reserved/],
    // IPv6 loopback, unspecified, unique-local, link-local, site-local, multicast, documentation, discard
    ['::1', /loopback/], ['0:0:0:0:0:0:0:1', /loopback/], ['::', /unspecified/],
    ['fc00::1', /unique-local/], ['fd12:3456:789a::1', /unique-local/], ['fdff:ffff::', /unique-local/],
    ['fe80::1', /link-local/], ['febf::1', /link-local/], ['fe80::1%eth0', /link-local/],
    ['fec0::1', /site-local/], ['ff02::1', /multicast/], ['ff05::1:3', /multicast/],
    ['2001:db8::1', /documentation/], ['2001:0db8:85a3::8a2e:370:7334', /documentation/], ['3fff::1', /documentation/],
    ['100::1', /discard/], ['2001::1', /IETF|Teredo/], ['2001:2::1', /IETF/],
    // IPv4-mapped (dotted and hex), IPv4-compatible, NAT64 and 6to4 with private IPv4 inside
    ['::ffff:127.0.0.1', /loopback.*IPv4-mapped/], ['::ffff:7f00:1', /loopback/], ['0:0:0:0:0:ffff:7f00:0001', /loopback/],
    ['::ffff:10.1.2.3', /RFC 1918/], ['::ffff:169.254.169.254', /link-local/], ['::ffff:192.168.1.1', /RFC 1918/],
    ['::ffff:100.64.0.1', /CGNAT/], ['::ffff:0.0.0.0', /unspecified/],
    ['::127.0.0.1', /IPv4-compatible/], ['::10.0.0.1', /IPv4-compatible/],
    ['64:ff9b::127.0.0.1', /loopback.*NAT64/], ['64:ff9b::a00:1', /RFC 1918/], ['64:ff9b:1::1', /NAT64/],
    ['2002:7f00:1::1', /loopback.*6to4/], ['2002:c0a8:101::1', /RFC 1918/],
    // outside global unicast
    ['4000::1', /reserved/], ['c000::1', /reserved/], ['1::1', /reserved/],
    // not addresses
    ['localhost', /not an IP/], ['example.com', /not an IP/], ['1.2.3', /not an IP/], ['', /not an IP/],
  ];

  it.each(refused)('refuses %s', (address, category) => {
    const verdict = classifyAddress(address);
    expect(verdict.public).toBe(false);
    expect(!verdict.public && verdict.category).toMatch(category);
  });

  it.each([
    '1.1.1.1', '8.8.8.8', '93.184.215.14', '9.255.255.255', '11.0.0.0', '100.63.255.255', '100.128.0.0', '126.255.255.255',
    '128.0.0.0', '169.253.255.255', '169.255.0.0', '172.15.255.255', '172.32.0.0', '192.0.1.1', '192.167.255.255',
    '192.169.0.0', '198.17.255.255', '198.20.0.0', '223.255.255.255',
    '2606:4700:4700::1111', '2001:4860:4860::8888', '2a00:1450:4001:82b::200e', '2001:200::1', '2003::1', '3ffe::1',
    '::ffff:8.8.8.8', '::ffff:808:808', '64:ff9b::8.8.8.8', '2002:808:808::1', '[2606:4700:4700::1111]',
  ])('accepts public %s', (address) => {
    expect(classifyAddress(address)).toEqual({ public: true });
  });
});

function n11(run: () => unknown): Promise<KisteError> {
  return Promise.resolve()
    .then(run)
    .then(
      () => {
        throw new Error('expected N11');
      },
      (error: unknown) => {
        expect(error).toBeInstanceOf(KisteError);
        expect((error as KisteError).code).toBe('N11');
        expect((error as KisteError).details.param).toBe('url');
        return error as KisteError;
      },
    );
}

describe('the URL rule', () => {
  const names: Record<string, string[]> = {
    'hooks.example.com': ['93.184.215.14', '2606:2800:21f:cb07:6820:80da:af6b:8b2c'],
    'private.example.com': ['192.168.1.20'],
    'mixed.example.com': ['93.184.215.14', '10.0.0.7'],
    'metadata.example.com': ['169.254.169.254'],
    'mapped.example.com': ['::ffff:127.0.0.1'],
    'ula.example.com': ['fd00::5'],
    'cgnat.example.com': ['100.100.100.100'],
    'nothing.example.com': [],
  };
  const resolve: Resolver = async (hostname) => {
    const addresses = names[hostname];
    if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  };

  it('accepts a public HTTPS URL on 443 and returns the checked address to connect to', async () => {
    const target = await checkWebhookTarget('https://Hooks.Example.com:443/in?x=1', STRICT, resolve);
    expect(target).toMatchObject({ hostname: 'hooks.example.com', address: '93.184.215.14', family: 4 });
    expect(target.url.href).toBe('https://hooks.example.com/in?x=1');
    expect((await checkWebhookTarget('https://[2606:4700:4700::1111]/x', STRICT, resolve)).address).toBe('2606:4700:4700::1111');
  });

  it.each([
    ['http://hooks.example.com/', /https/],
    ['ftp://hooks.example.com/', /https/],
    ['https://hooks.example.com:8443/', /port 443/],
    ['https://user:pass@hooks.example.com/', /user name or password/],
    ['https://user@hooks.example.com/', /user name or password/],
    ['not a url', /valid absolute URL/],
  ])('refuses %s', async (url, message) => {
    expect((await n11(() => checkWebhookTarget(url, STRICT, resolve))).message).toMatch(message);
  });

  it.each([
    ['https://localhost/', /127\.0\.0\.1|::1/],
    ['https://127.0.0.1/', /loopback/],
    ['https://2130706433/', /loopback/], // 127.0.0.1 as one number: the URL parser normalises it
    ['https://0x7f.1/', /loopback/],
    ['https://[::1]/', /loopback/],
    ['https://[::ffff:127.0.0.1]/', /loopback/],
    ['https://[::ffff:a9fe:a9fe]/', /link-local/],
    ['https://169.254.169.254/latest/meta-data', /link-local/],
    ['https://0.0.0.0/', /unspecified/],
    ['https://[fd00::1]/', /unique-local/],
    ['https://[fe80::1]/', /link-local/],
    ['https://10.1.2.3/', /RFC 1918/],
    ['https://100.64.1.1/', /CGNAT/],
    ['https://224.0.0.251/', /multicast/],
    ['https://192.0.2.1/', /documentation/],
    ['https://private.example.com/', /resolves to 192\.168\.1\.20/],
    ['https://mixed.example.com/', /resolves to 10\.0\.0\.7/],
    ['https://metadata.example.com/', /169\.254\.169\.254/],
    ['https://mapped.example.com/', /loopback/],
    ['https://ula.example.com/', /unique-local/],
    ['https://cgnat.example.com/', /CGNAT/],
    ['https://nothing.example.com/', /no address/],
    ['https://unknown.example.com/', /could not be resolved/],
  ])('refuses %s (address rule)', async (url, message) => {
    // localhost goes to the system resolver (/etc/hosts)
    const resolver: Resolver = url.includes('localhost') ? (host) => import('node:dns/promises').then((dns) => dns.lookup(host, { all: true })) : resolve;
    expect((await n11(() => checkWebhookTarget(url, STRICT, resolver))).message).toMatch(message);
  });

  it('with the unsafe operator setting: http, other ports and private addresses pass; credentials still do not', async () => {
    expect((await checkWebhookTarget('http://127.0.0.1:8080/hook', UNSAFE, resolve)).address).toBe('127.0.0.1');
    expect((await checkWebhookTarget('https://private.example.com:9443/', UNSAFE, resolve)).address).toBe('192.168.1.20');
    await n11(() => parseWebhookUrl('http://a:b@127.0.0.1/', UNSAFE));
    await n11(() => parseWebhookUrl('ftp://127.0.0.1/', UNSAFE));
  });
});
