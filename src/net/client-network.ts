// What counts as one client for per-address budgets: an IPv4 address itself (also when a dual-stack
// socket reports it IPv4-mapped), an IPv6 address by its /64, the block one subscriber usually
// holds whole, so that one host cannot count as endless clients by changing its low bits.
import { isIP } from 'node:net';
import { parseCidr } from './special-addresses';

export function clientNetwork(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped && isIP(mapped[1]!) === 4) return mapped[1]!;
  if (isIP(address) !== 6) return address;
  return parseCidr(`${address}/64`)?.cidr ?? address;
}
