// The jail of every machine's QEMU: user, files, network rules, limits (see machine-jail.ts).
export { HostJail, type JailProblem, type JailUser, type MachineJail, type QemuFiles } from './machine-jail';
export { egressTable, type EgressMode } from './egress-rules';
