// The worker's side of fencing (worker-api.yaml, "Fencing"). A run of the worker starts unadopted
// (epoch 0) and acts on machine commands only when they name the epoch a control plane adopted it
// with, so a command sent before the worker was adopted again, or one reaching a worker revived from
// an older state, never acts. Adoption ends with a removal of strays: what a command of the new
// epoch has addressed meanwhile is kept, since the control plane placed it after reading its list.

export class WorkerFencing {
  private current = 0;
  /** Machines addressed by commands of the current epoch. */
  private readonly addressed = new Set<string>();

  get epoch(): number {
    return this.current;
  }

  /** Adopts the worker under `epoch`, which must be higher than any before; false (nothing changed) otherwise. */
  fence(epoch: number): boolean {
    if (!Number.isSafeInteger(epoch) || epoch <= this.current) return false;
    this.current = epoch;
    this.addressed.clear();
    return true;
  }

  /** Whether a command sent under `epoch` may act: only of the current epoch, and never before adoption. */
  admits(epoch: number): boolean {
    return this.current > 0 && epoch === this.current;
  }

  /** A command of the current epoch addresses this machine (it is kept by the next removal of strays). */
  address(machineId: string): void {
    this.addressed.add(machineId);
  }

  /** Whether a command of the current epoch has addressed this machine. */
  addressedNow(machineId: string): boolean {
    return this.addressed.has(machineId);
  }
}
