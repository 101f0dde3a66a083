// A machine jail for tests that drive a QemuMachineHost (or a whole service) without the HTTP
// layer: its own uid range (its own nftables table), so test files running side by side never
// replace each other's network rules.
import { randomInt } from 'node:crypto';
import { HostJail } from '../../src/compute/jail';
import { machineHostFolders } from '../../src/compute/qemu-machine-host';
import type { EgressMode } from '../../src/compute/jail';
import type { Cidr } from '../../src/net/special-addresses';

/** A uid base of its own for one test service: 1000000000 + 65536·k. */
export function testUidBase(): number {
  return 1_000_000_000 + 65_536 * randomInt(1, 16_000);
}

export function testJail(dataDir: string, imagesDir: string, egress: { mode: EgressMode; allow: Cidr[] } = { mode: 'public', allow: [] }): HostJail {
  const folders = machineHostFolders(dataDir);
  return new HostJail({
    machinesDir: folders.machines,
    layersDir: folders.layers,
    passThrough: [folders.machines, folders.layers, imagesDir],
    uidBase: testUidBase(),
    egress,
    logger: { info: () => undefined, warn: () => undefined },
  });
}
