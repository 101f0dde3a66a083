// Where the service's machines run, as the service holds it: in a local kiste-worker it supervises
// (KISTE_COMPUTE=worker, the default) or in its own process (in-process). Either way the domain
// gets one MachineHost and one MachineDisplay; only start, stop and the return of a host that was
// out of reach differ.
import type { ComputeCounts } from '../observability/metrics';
import type { HostJail } from './jail';
import type { MachineDisplay } from './machine-display';
import type { HostImage, ImageProfile, MachineHost } from './machine-host';
import type { QemuMachineHost } from './qemu-machine-host';
import { createComputeHost, type ComputeHostSettings } from './compute-host';

/** The host as the service holds it: every job of MachineHost, and reading the image already there. */
export interface ServiceHost extends MachineHost {
  /** Reads the profile's newest ready image now; null while none is ready. */
  refreshImage(profile: ImageProfile): Promise<HostImage | null>;
}

export interface ServiceCompute {
  readonly kind: 'worker' | 'workers' | 'in-process';
  readonly host: ServiceHost;
  readonly display: MachineDisplay;
  /** The in-process host and its jail (benchmarks and tests reach into them); null when a worker runs the machines. */
  readonly inProcess: { machineHost: QemuMachineHost; machineJail: HostJail } | null;
  /** Starts compute and reads the image already there; true when machines can be reconciled now (the host answers). */
  start(profile: ImageProfile): Promise<boolean>;
  /** Called each time the host answers again after it could not be reached (never for in-process); several hosts: with the worker's id. */
  onBack(listener: (workerId?: string) => void): void;
  /** Ends compute; machines keep running for the next start to adopt. */
  stop(): Promise<void>;
  /** What a worker process counted in its current run, for the metrics; null in-process (counted as it happens) or while it does not answer. */
  counts(): Promise<ComputeCounts | null>;
}

export class InProcessCompute implements ServiceCompute {
  readonly kind = 'in-process';
  readonly host: QemuMachineHost;
  readonly display: MachineDisplay;
  readonly inProcess: { machineHost: QemuMachineHost; machineJail: HostJail };

  constructor(settings: ComputeHostSettings) {
    const { jail, machineHost, machineDisplay } = createComputeHost(settings);
    this.host = machineHost;
    this.display = machineDisplay;
    this.inProcess = { machineHost, machineJail: jail };
  }

  async start(profile: ImageProfile): Promise<boolean> {
    await this.host.refreshImage(profile);
    return true;
  }

  onBack(): void {
    // The process that serves the API runs the machines: it is never out of reach of itself.
  }

  async counts(): Promise<null> {
    return null;
  }

  async stop(): Promise<void> {
    this.host.detachAll(); // machines keep running; the next start adopts them
    await this.inProcess.machineJail.stopWatching(); // their network rules stay; the next start watches them again
  }
}
