// A machine jail for tests that drive a QemuMachineHost (or a whole service) without the HTTP
// layer: its own uid range (its own nftables table), so test files running side by side never
// replace each other's network rules.
import { randomInt } from 'node:crypto';
import { HostJail } from '../../src/compute/jail';
import { DEFAULT_MACHINE_UID_BASE } from '../../src/config';
import { machineHostFolders } from '../../src/compute/qemu-machine-host';
import type { EgressMode } from '../../src/compute/jail';
import type { Cidr } from '../../src/net/special-addresses';

/** A uid base of its own for one test service: the default + 65536·k, below systemd's foreign range. */
export function testUidBase(): number {
  return DEFAULT_MACHINE_UID_BASE + 65_536 * randomInt(1, 4_000);
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
