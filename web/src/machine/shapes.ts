// Machine shapes offered at create. The API takes any vcpu/memory_mib/disk_mib within the account's
// limits (GET /v1/status); it names no shapes itself. "Default" is the spec's default shape; "Large"
// is the most this account allows per machine, with twice the default disk.
import type { Schemas } from '../api';
import { formatMib } from './format';

export interface Shape {
  vcpu: number;
  memory_mib: number;
  disk_mib: number;
}

export type ShapeChoice = 'default' | 'large' | 'custom';

export const DEFAULT_SHAPE: Shape = { vcpu: 4, memory_mib: 8192, disk_mib: 81920 };

export function largeShape(limits: Schemas['ResourceLimitsResponse']): Shape {
  return { vcpu: limits.vcpu_per_machine, memory_mib: limits.memory_mib_per_machine, disk_mib: 2 * DEFAULT_SHAPE.disk_mib };
}

/** Disk the account may still give a new machine. */
export function diskLeftMib(status: Schemas['ControlPlaneStatusResponse']): number {
  return Math.max(0, status.limits.disk_mib_total - status.usage.disk_mib);
}

/** Why a shape cannot be created on this account now, or null when it fits. */
export function shapeProblem(shape: Shape, status: Schemas['ControlPlaneStatusResponse']): string | null {
  const { limits } = status;
  if (shape.vcpu > limits.vcpu_per_machine) return `At most ${limits.vcpu_per_machine} vCPUs per machine.`;
  if (shape.memory_mib > limits.memory_mib_per_machine) return `At most ${formatMib(limits.memory_mib_per_machine)} of memory per machine.`;
  if (shape.disk_mib > diskLeftMib(status)) return `Only ${formatMib(diskLeftMib(status))} of disk are left on this account.`;
  return null;
}

export function describeShape(shape: Shape): string {
  return `${shape.vcpu} vCPU${shape.vcpu === 1 ? '' : 's'}, ${formatMib(shape.memory_mib)} memory, ${formatMib(shape.disk_mib)} disk`;
}
