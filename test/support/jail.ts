// A machine jail for tests that drive a QemuMachineHost (or a whole service) without the HTTP
// layer: its own uid range (its own nftables table), so test files running side by side never
// replace each other's network rules.
import { createHash, randomInt } from 'node:crypto';
import { HostJail } from '../../src/compute/jail';
import { DEFAULT_MACHINE_UID_BASE } from '../../src/config';
import { machineHostFolders } from '../../src/compute/qemu-machine-host';
import type { EgressMode } from '../../src/compute/jail';
import type { Cidr } from '../../src/net/special-addresses';

/** Test uid bases: the default + 65536·k for k in 1…TEST_BASES, below systemd's foreign range. */
const TEST_BASES = 3_999;
const testBase = (k: number) => DEFAULT_MACHINE_UID_BASE + 65_536 * k;

/** A uid base of its own for one test service. */
export function testUidBase(): number {
  return testBase(randomInt(1, TEST_BASES + 1));
}

/**
 * The uid base of a service process that runs on this data folder: its own (test files run side by
 * side, and every base has its own nftables table and its own frozen-while-broken processes), and
 * the same at each restart on the folder, so a restarted service adopts what the last one ran.
 */
export function testUidBaseFor(dataDir: string): number {
  return testBase(1 + (createHash('sha256').update(dataDir).digest().readUInt32BE(0) % TEST_BASES));
}

export function testJail(dataDir: string, imagesDir: string, egress: { mode: EgressMode; allow: Cidr[] } = { mode: 'public', allow: [] }): HostJail {
  const folders = machineHostFolders(dataDir);
  return new HostJail({
    machinesDir: folders.machines,
    layersDir: folders.layers,
    passThrough: [folders.machines, folders.layers, imagesDir],
    uidBase: testUidBase(),
    egress,
    logger: { info: () => undefined, warn: () => undefined, error: () => undefined },
  });
}
