// Builds the QEMU argv of one machine. Pure: no file system, no process; the same spec always gives
// the same argv, which matters because a memory restore must start QEMU with exactly the devices
// the saved state came from (plus `-incoming defer`).
//
// Shape of a machine (see the comments at each group below for why):
//   q35, no default devices, no display; direct kernel boot (kernel + initrd + append);
//   the disk as a -blockdev qcow2 node named DISK_NODE (QMP addresses it by that name for
//   snapshots and dirty bitmaps) on a virtio-blk device with qdev id DISK_DEVICE;
//   virtio-serial with one port named AGENT_PORT_NAME whose host side is a unix socket (server);
//   user-mode networking (no host forwards) on virtio-net; serial console appended to a file;
//   QMP on a unix socket; a pid file; optionally guest RAM in a shared file (fast memory sessions);
//   QEMU's seccomp sandbox (SANDBOX); for an image with a screen, a display device with a virtio
//   tablet and keyboard, served by QEMU's VNC server on a unix socket; optionally a VM generation ID.
/** How guest code runs: hardware virtualisation, or QEMU's binary translator. */
export type Accelerator = 'kvm' | 'tcg';

/** The virtio-serial port name the guest agent looks for. */
export const AGENT_PORT_NAME = 'org.kiste.agent';
/** node-name of the disk's qcow2 format node when QEMU starts (snapshots add new top nodes). */
export const DISK_NODE = 'disk0';
/** qdev id of the virtio-blk device: query-block reports it as /machine/peripheral/vda/... */
export const DISK_DEVICE = 'vda';
/** Every machine's `-name` is this prefix + its id: how we recognise our QEMU processes. */
export const PROCESS_NAME_PREFIX = 'kiste-';

/**
 * QEMU's seccomp filter: no obsolete system calls, no set*uid/gid (it never regains root), no
 * fork/exec (a taken-over QEMU cannot start a program: memory sessions therefore migrate over unix
 * sockets, never `exec:`), no scheduler or CPU-affinity changes (cgroups set its share).
 */
export const SANDBOX = 'on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny';

/**
 * TCG's translated-code cache in MiB. QEMU's default (1 GiB) is address space that fills as the
 * guest runs new code; bounded, it is part of the fixed overhead the memory ceiling allows for.
 */
export const TCG_CODE_CACHE_MIB = 256;

/** sun_path of a unix socket holds 108 bytes including the terminating NUL. */
export const MAX_SOCKET_PATH = 107;

/**
 * Video memory of the display device. bochs-drm accepts a mode only when two frames of it fit
 * (double buffering, 4 bytes per pixel): 2 × 2560 × 1600 × 4 bytes = 31.25 MiB for DISPLAY_MAX.
 */
export const DISPLAY_VGAMEM_MIB = 32;
/** The largest screen the display device's EDID offers (DISPLAY_MAX in ../machine-display.ts). */
export const DISPLAY_EDID_MAX = { width: 2560, height: 1600 };
/** The virtio-serial port name of QEMU's vdagent (clipboard); the guest's spice-vdagentd opens it. */
export const VDAGENT_PORT_NAME = 'com.redhat.spice.0';

/** A screen: display device, tablet and keyboard, and QEMU's VNC server on a unix socket. */
export interface DisplayDeviceSpec {
  /** QEMU's VNC server listens here (RFB 3.8, no authentication: only the service reaches the folder). */
  socket: string;
  /** Initial size (the EDID's preferred mode). */
  width: number;
  height: number;
  /**
   * QEMU's vdagent on a virtio-serial port: with spice-vdagent in the guest, the guest's clipboard is
   * the VNC clients' (QEMU's extended clipboard). QEMU 7.2 refuses to migrate a machine with it ("The
   * vdagent chardev doesn't yet support migration"), so memory sessions fail: the host does not use it.
   */
  clipboard?: boolean;
}

export interface MachineSpec {
  /** Machine id: letters, digits, '-' and '_' (it is put into QEMU option strings). */
  id: string;
  vcpu: number;
  memoryMib: number;
  kernel: string;
  initrd?: string;
  /** The disk's active qcow2 file (an overlay on the image; after a live snapshot, the newest top). */
  disk: string;
  /** Kernel command line, e.g. `root=/dev/vda console=ttyS0`. */
  appendArgs: string;
  accelerator: Accelerator;
  qmpSocket: string;
  agentSocket: string;
  serialLog: string;
  pidFile: string;
  /** Guest RAM backed by this file (share=on): a memory save then only writes device state. */
  memoryFile?: string;
  /** Start waiting for an incoming migration (`migrate-incoming`) instead of booting. */
  incoming?: boolean;
  /** Start with the vCPUs stopped (`-S`); QMP `cont` runs the guest. */
  paused?: boolean;
  /** A screen (images with a display); absent: no display device at all. */
  display?: DisplayDeviceSpec;
  /**
   * A VM generation ID device (vmgenid, a new random id at every QEMU start): a guest restored from
   * a memory image another machine also continues (boot snapshot, fork with memory) reseeds its
   * kernel RNG when the id changes. Part of the device set: a restore must match the save.
   */
  generationId?: boolean;
}

const ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

/** QEMU option values escape a comma by doubling it (`-blockdev filename=a,,b`). */
export function optionValue(value: string): string {
  return value.replace(/,/g, ',,');
}

export function validateSpec(spec: MachineSpec): void {
  if (!ID_PATTERN.test(spec.id)) throw new Error(`machine id ${JSON.stringify(spec.id)} must match ${ID_PATTERN}`);
  if (!Number.isInteger(spec.vcpu) || spec.vcpu < 1) throw new Error(`vcpu must be a positive integer, got ${spec.vcpu}`);
  if (!Number.isInteger(spec.memoryMib) || spec.memoryMib < 16) throw new Error(`memoryMib must be an integer >= 16, got ${spec.memoryMib}`);
  for (const [name, path] of [
    ['kernel', spec.kernel],
    ['disk', spec.disk],
    ['qmpSocket', spec.qmpSocket],
    ['agentSocket', spec.agentSocket],
    ['serialLog', spec.serialLog],
    ['pidFile', spec.pidFile],
    ...(spec.initrd ? [['initrd', spec.initrd]] : []),
    ...(spec.memoryFile ? [['memoryFile', spec.memoryFile]] : []),
    ...(spec.display ? [['display.socket', spec.display.socket]] : []),
  ] as const) {
    // Absolute paths: QEMU resolves relative ones against its own cwd, and exec: migration runs a
    // shell; a path must mean the same thing to every process that sees it.
    if (!path.startsWith('/')) throw new Error(`${name} must be an absolute path, got ${JSON.stringify(path)}`);
    if (/[\0\n]/.test(path)) throw new Error(`${name} contains a NUL or newline`);
  }
  for (const [name, path] of [
    ['qmpSocket', spec.qmpSocket],
    ['agentSocket', spec.agentSocket],
    ...(spec.display ? [['display.socket', spec.display.socket]] : []),
  ] as const) {
    if (Buffer.byteLength(path) > MAX_SOCKET_PATH) throw new Error(`${name} is longer than ${MAX_SOCKET_PATH} bytes (unix socket limit): ${path}`);
  }
  if (spec.display) {
    const { width, height } = spec.display;
    for (const [name, value, max] of [['width', width, DISPLAY_EDID_MAX.width], ['height', height, DISPLAY_EDID_MAX.height]] as const) {
      if (!Number.isInteger(value) || value < 1 || value > max) throw new Error(`display ${name} must be an integer in 1..${max}, got ${value}`);
    }
  }
}

/** The process name (`-name`) of a machine: also what identifies its QEMU in /proc/<pid>/cmdline. */
export function processName(id: string): string {
  return `${PROCESS_NAME_PREFIX}${id}`;
}

export function buildQemuArgs(spec: MachineSpec): string[] {
  validateSpec(spec);
  const v = optionValue;
  const args: string[] = [];

  // Identity first: adoption and orphan reaping read it back from /proc/<pid>/cmdline.
  args.push('-name', processName(spec.id));

  // No defaults (no VGA, no NIC, no floppy/CD), no user config files, no window. q35 is the modern
  // PCIe machine; with file-backed RAM the machine's memory comes from the backend object.
  args.push('-nodefaults', '-no-user-config', '-display', 'none');
  args.push('-sandbox', SANDBOX);
  args.push('-machine', spec.memoryFile ? 'q35,memory-backend=mem' : 'q35');
  if (spec.accelerator === 'kvm') {
    args.push('-accel', 'kvm', '-cpu', 'host');
  } else {
    // One host thread per vCPU; without thread=multi TCG runs all vCPUs on one thread.
    args.push('-accel', `tcg,thread=multi,tb-size=${TCG_CODE_CACHE_MIB}`);
  }
  args.push('-smp', String(spec.vcpu), '-m', `${spec.memoryMib}M`);
  if (spec.memoryFile) {
    // share=on: the guest's RAM pages ARE the file's pages (MAP_SHARED), so with the migration
    // capability x-ignore-shared a save writes only device state, and the file is the memory image.
    args.push('-object', `memory-backend-file,id=mem,size=${spec.memoryMib}M,mem-path=${v(spec.memoryFile)},share=on`);
  }

  // Direct kernel boot: no bootloader in the image, the host picks kernel and command line.
  args.push('-kernel', spec.kernel);
  if (spec.initrd) args.push('-initrd', spec.initrd);
  args.push('-append', spec.appendArgs);

  // Disk: protocol node (the file) + format node (qcow2, which opens its backing chain itself).
  // Named nodes so that QMP can snapshot (blockdev-snapshot-sync), add dirty bitmaps and run block
  // jobs on them; the guest sees /dev/vda. discard=unmap: a guest's TRIM gives space back, so
  // overlays stay as sparse as the guest's data.
  args.push('-blockdev', `driver=file,node-name=${DISK_NODE}-file,filename=${v(spec.disk)},discard=unmap`);
  args.push('-blockdev', `driver=qcow2,node-name=${DISK_NODE},file=${DISK_NODE}-file,discard=unmap`);
  args.push('-device', `virtio-blk-pci,drive=${DISK_NODE},id=${DISK_DEVICE}`);

  // Agent channel: these hosts have no vhost-vsock, so a virtio-serial port. QEMU listens on the
  // unix socket (server=on) and does not wait for a client (wait=off); the host agent client may
  // connect and reconnect at any time.
  args.push('-device', 'virtio-serial-pci,id=vser0');
  args.push('-chardev', `socket,id=agent,path=${v(spec.agentSocket)},server=on,wait=off`);
  args.push('-device', `virtserialport,bus=vser0.0,chardev=agent,name=${AGENT_PORT_NAME}`);

  // Outbound network through QEMU's user-mode stack; no hostfwd: nothing of a guest listens on the
  // host's ports (remote access goes through the agent).
  args.push('-netdev', 'user,id=net0');
  args.push('-device', 'virtio-net-pci,netdev=net0');

  // Serial console (ttyS0) to a file. append=on: a restore or a reboot onto the same file must not
  // truncate it (QEMU's file chardev truncates by default); the logs endpoint reads its tail.
  args.push('-chardev', `file,id=serial0,path=${v(spec.serialLog)},append=on`);
  args.push('-serial', 'chardev:serial0');

  // Control: QMP on a unix socket (one client at a time); pid file (QEMU locks it while running and
  // removes it on a clean exit).
  args.push('-chardev', `socket,id=qmp,path=${v(spec.qmpSocket)},server=on,wait=off`);
  args.push('-mon', 'chardev=qmp,mode=control');
  args.push('-pidfile', spec.pidFile);

  if (spec.display) {
    const d = spec.display;
    // The screen: bochs-display is a plain linear framebuffer (no VGA legacy), with an EDID whose
    // preferred mode is the initial size; the guest's bochs DRM driver and Xorg's modesetting driver
    // run it. Absolute pointer and keyboard on virtio (no USB controller needed).
    args.push('-device', `bochs-display,id=display0,vgamem=${DISPLAY_VGAMEM_MIB}M,xres=${d.width},yres=${d.height},xmax=${DISPLAY_EDID_MAX.width},ymax=${DISPLAY_EDID_MAX.height}`);
    args.push('-device', 'virtio-tablet-pci,id=tablet0');
    args.push('-device', 'virtio-keyboard-pci,id=keyboard0');
    // QEMU's VNC server on a unix socket in the run folder (only the service can reach it; no
    // password). share=force-shared: a viewer asking for exclusive access does not throw the others
    // out. lossy=off: pixels leave exact (the service re-encodes them anyway).
    args.push('-vnc', `unix:${v(d.socket)},share=force-shared,lossy=off`);
    if (d.clipboard) {
      // QEMU's own vdagent: with spice-vdagent in the guest, the guest clipboard and the VNC
      // clients' cut text are one (ServerCutText / ClientCutText).
      args.push('-chardev', 'qemu-vdagent,id=vdagent,clipboard=on');
      args.push('-device', `virtserialport,bus=vser0.0,chardev=vdagent,name=${VDAGENT_PORT_NAME}`);
    }
  }

  // guid=auto: QEMU draws a new id each start; on an incoming migration the restored guest sees it
  // change (ACPI notify) and Linux >= 5.18 reseeds its RNG.
  if (spec.generationId) args.push('-device', 'vmgenid,id=vmgenid0,guid=auto');

  // Restore: bring up the devices, then wait for `migrate-incoming` over QMP (so we can set
  // migration capabilities first, which `-incoming URI` would not allow).
  if (spec.incoming) args.push('-incoming', 'defer');
  else if (spec.paused) args.push('-S');
  return args;
}
