// Per-address budgets count an IPv4 address as itself and an IPv6 address by its /64.
import { clientNetwork } from '../../src/net/client-network';

describe('client network of an address', () => {
  it('is an IPv4 address itself, also IPv4-mapped from a dual-stack socket', () => {
    expect(clientNetwork('203.0.113.7')).toBe('203.0.113.7');
    expect(clientNetwork('::ffff:203.0.113.7')).toBe('203.0.113.7');
    expect(clientNetwork('::ffff:203.0.113.8')).not.toBe(clientNetwork('::ffff:203.0.113.7'));
  });

  it('is the /64 of an IPv6 address: the low bits of one host do not make new clients', () => {
    const a = clientNetwork('2001:db8:1:2:aaaa:bbbb:cccc:dddd');
    expect(a).toBe('2001:db8:1:2:0:0:0:0/64');
    expect(clientNetwork('2001:db8:1:2::1')).toBe(a);
    expect(clientNetwork('2001:db8:1:3::1')).not.toBe(a);
    expect(clientNetwork('::1')).toBe('0:0:0:0:0:0:0:0/64');
  });

  it('leaves what is not an address as it is', () => {
    expect(clientNetwork('unknown')).toBe('unknown');
  });
});
