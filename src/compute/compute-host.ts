// Everything that runs machines on this host, put together in one place: the jail, the QEMU machine
// host and the display. The service builds it today; a kiste-worker builds the same (issue 22), and
// neither side needs the database for it.
import type { Config } from '../config';
import type { Cidr } from '../net/special-addresses';
import { QemuMachineDisplay } from './guest-display';
import { HostJail } from './jail';
import { EncoderJail } from './jail/encoder-jail';
import type { Accelerator } from './machine-host';
import { untilDesktopReady, type MachineDisplay } from './machine-display';
import { machineHostFolders, QemuMachineHost } from './qemu-machine-host';

export interface ComputeHostSettings {
  dataDir: string;
  imagesDir: string;
  accelerator: Accelerator;
  bootSnapshots: boolean;
  machineUidBase: number;
  machineEgress: { mode: 'public' | 'off'; allow: Cidr[] };
  logger: { info(object: object, message: string): void; warn(object: object, message: string): void; error(object: object, message: string): void };
  /** Tests drive a display of their own. */
  machineDisplay?: MachineDisplay;
  /** A machine's agent link was dropped because its guest misbehaved. */
  onAgentLinkDropped?: (id: string, reason: string) => void;
}

/** The settings of a host from the configuration (the service's in-process host, a worker's). */
export function computeSettingsOf(config: Config, accelerator: Accelerator, logger: ComputeHostSettings['logger']): ComputeHostSettings {
  return {
    dataDir: config.dataDir,
    imagesDir: config.imagesDir,
    accelerator,
    bootSnapshots: config.bootSnapshots,
    machineUidBase: config.machineUidBase,
    machineEgress: config.machineEgress,
    logger,
  };
}

export interface ComputeHost {
  jail: HostJail;
  machineHost: QemuMachineHost;
  machineDisplay: MachineDisplay;
}

export function createComputeHost(settings: ComputeHostSettings): ComputeHost {
  const folders = machineHostFolders(settings.dataDir);
  const jail = new HostJail({
    machinesDir: folders.machines,
    layersDir: folders.layers,
    passThrough: [folders.machines, folders.layers, folders.snapshots, settings.imagesDir],
    uidBase: settings.machineUidBase,
    egress: settings.machineEgress,
    logger: settings.logger,
  });
  // The display reads the host's machines and the host waits for desktops before saving a boot snapshot.
  let machineDisplay: MachineDisplay | undefined;
  const machineHost = new QemuMachineHost({
    dataDir: settings.dataDir,
    imagesDir: settings.imagesDir,
    accelerator: settings.accelerator,
    bootSnapshots: settings.bootSnapshots,
    templateSettled: (id) => untilDesktopReady(machineDisplay!, id),
    logger: settings.logger,
    jail,
    onAgentLinkDropped: settings.onAgentLinkDropped,
    encoders: new EncoderJail({ uidBase: settings.machineUidBase }),
  });
  machineDisplay = settings.machineDisplay ?? new QemuMachineDisplay(machineHost);
  return { jail, machineHost, machineDisplay };
}
