// The checks before a machine is created or started (spec: L02 machines, L03 running at once,
// L04 disk, L08 shape, L13 host capacity). One place, used by create, resume, restart and fork.
import { KisteError } from '../errors';
import type { Limits } from './limits';

export interface AccountFootprint {
  machines: number;
  runningMachines: number;
  diskMib: number;
}

export interface Shape {
  vcpu: number;
  memoryMib: number;
  diskMib: number;
}

export function checkShape(limits: Limits, shape: Shape): void {
  if (shape.vcpu > limits.vcpuPerMachine) {
    throw new KisteError('L08', { message: `At most ${limits.vcpuPerMachine} vCPUs per machine`, param: 'vcpu' });
  }
  if (shape.memoryMib > limits.memoryMibPerMachine) {
    throw new KisteError('L08', { message: `At most ${limits.memoryMibPerMachine} MiB of memory per machine`, param: 'memory_mib' });
  }
}

/** A new machine: it counts as one more machine, one more running and its whole disk. */
export function checkNewMachine(limits: Limits, footprint: AccountFootprint, shape: Shape): void {
  checkShape(limits, shape);
  if (footprint.machines >= limits.machines) {
    throw new KisteError('L02', { message: `An account can have at most ${limits.machines} machines` });
  }
  checkStart(limits, footprint);
  if (footprint.diskMib + shape.diskMib > limits.diskMibTotal) {
    throw new KisteError('L04', {
      message: `The account's machines may use at most ${limits.diskMibTotal} MiB of disk; ${footprint.diskMib} MiB are in use`,
      param: 'disk_mib',
    });
  }
}

/** A stopped machine starting again. */
export function checkStart(limits: Limits, footprint: AccountFootprint): void {
  if (footprint.runningMachines >= limits.runningMachines) {
    throw new KisteError('L03', { message: `At most ${limits.runningMachines} machines of an account may run at once` });
  }
}

/** The host itself: memory for the guest must be free now (L13 is retryable). */
export function checkHostCapacity(freeHostMib: number, memoryMib: number, reserveMib: number): void {
  if (memoryMib + reserveMib > freeHostMib) {
    throw new KisteError('L13', { message: `This host has no room for ${memoryMib} MiB of guest memory right now` });
  }
}
