// The worker's side of fencing (worker-api.yaml, "Fencing"). A run of the worker starts unadopted
// (epoch 0) and admits machine commands only when they name the epoch a control plane adopted it
// with: a command that arrives after the worker was adopted again, or one reaching a worker revived
// from an older state, is refused. Adoption ends with a removal of strays, which keeps, besides the
// machines the control plane's list owns:
// - every machine while a removal of an older epoch runs on (its list is out of date);
// - machines a command is working on now, whatever its epoch (admitted before a fence, it runs on);
// - machines a command of this epoch changed lately (placed after the control plane read its list).

/** How long a machine a command changed is kept from a removal of strays (far longer than a list read takes to reach the worker). */
export const ADDRESSED_KEEP_MS = 10 * 60_000;

/**
 * Where the adoption of this run stands: fenced, removing its strays, done, done but for strays a
 * command was still working on (`partial`: asked again), or failed (asked again).
 */
export type AdoptionState = 'unadopted' | 'pending' | 'removing' | 'done' | 'partial' | 'failed';

export class WorkerFencing {
  private current = 0;
  private adoption: AdoptionState = 'unadopted';
  private adoptionSince = Date.now();
  /** Machines changed by commands of the current epoch: when, last. */
  private readonly addressed = new Map<string, number>();
  /** Machines with a command running now (any epoch): how many. */
  private readonly busy = new Map<string, number>();

  constructor(private readonly now: () => number = Date.now) {}

  get epoch(): number {
    return this.current;
  }

  /** Where the adoption stands and for how many seconds it has (hello says so: a control plane adopts again when it failed or stalled). */
  get state(): { state: AdoptionState; seconds: number } {
    return { state: this.adoption, seconds: Math.max(0, Math.min(2_147_483_647, Math.floor((this.now() - this.adoptionSince) / 1000))) };
  }

  /** Adopts the worker under `epoch`, which must be higher than any before; false (nothing changed) otherwise. */
  fence(epoch: number): boolean {
    if (!Number.isSafeInteger(epoch) || epoch <= this.current) return false;
    this.current = epoch;
    this.addressed.clear();
    this.setAdoption('pending');
    return true;
  }

  /** Whether a command sent under `epoch` may act: only of the current epoch, and never before adoption. */
  admits(epoch: number): boolean {
    return this.current > 0 && epoch === this.current;
  }

  /** A command of the current epoch changes this machine (a later removal of strays keeps it for ADDRESSED_KEEP_MS). */
  address(machineId: string): void {
    this.addressed.delete(machineId); // re-inserted last: the map stays in time order
    this.addressed.set(machineId, this.now());
    this.forgetOld();
  }

  /** The machine is gone (destroyed): nothing keeps it any more. */
  forget(machineId: string): void {
    this.addressed.delete(machineId);
  }

  /** A command works on this machine until the returned function is called. */
  begin(machineId: string): () => void {
    this.busy.set(machineId, (this.busy.get(machineId) ?? 0) + 1);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      const left = (this.busy.get(machineId) ?? 1) - 1;
      if (left > 0) this.busy.set(machineId, left);
      else this.busy.delete(machineId);
    };
  }

  /** Whether a removal of strays admitted under `epoch` must keep this machine (asked as it goes). */
  keeps(machineId: string, epoch: number): boolean {
    if (epoch !== this.current) return true; // a newer adoption's list decides
    if (this.busy.has(machineId)) return true;
    const at = this.addressed.get(machineId);
    return at !== undefined && this.now() - at < ADDRESSED_KEEP_MS;
  }

  /**
   * Whether a removal under `epoch` keeps this machine only because a command still works on it
   * (one admitted before the fence, say): the removal is then partial, and is asked again.
   */
  keptForWorkOnly(machineId: string, epoch: number): boolean {
    if (epoch !== this.current || !this.busy.has(machineId)) return false;
    const at = this.addressed.get(machineId);
    return at === undefined || this.now() - at >= ADDRESSED_KEEP_MS;
  }

  /** A removal of strays under `epoch` starts or ends (only the current epoch's counts). */
  removal(epoch: number, state: 'removing' | 'done' | 'partial' | 'failed'): void {
    if (epoch === this.current) this.setAdoption(state);
  }

  private setAdoption(state: AdoptionState): void {
    this.adoption = state;
    this.adoptionSince = this.now();
  }

  private forgetOld(): void {
    const oldest = this.now() - ADDRESSED_KEEP_MS;
    for (const [id, at] of this.addressed) {
      if (at >= oldest) break;
      this.addressed.delete(id);
    }
  }
}
