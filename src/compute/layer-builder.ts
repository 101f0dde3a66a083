// Derived image layers: Debian packages installed on a base image version inside a builder machine
// (a jailed QEMU like any other: package scripts run in a guest, never on the host), whose disk top
// then becomes a read-only layer in the image folder, `<version>/layers/<key>/disk.qcow2`, backing
// onto the version's disk. The key is content-addressed (base + packages): a layer once built is
// found again; one build per key at a time in this process.
import { copyFile, mkdir, readFile, rename, rm, writeFile, chmod } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { isAbsolute, join, resolve } from 'node:path';
import type { GuestAgent } from './guest-agent';
import type { GuestIdentity, HostImage, MachineShape } from './machine-host';
import { acquireLock } from '../../images/lock';
import { qcow2Header } from './qemu';
import { headerProblem } from './layers';

export const BUILDER_PREFIX = 'builder-';
const BUILD_TIMEOUT_MS = 45 * 60_000;
const BUILDER_SHAPE = { vcpu: 1, memoryMib: 1024 };
const MIB = 1024 * 1024;
/** A builder boots as nobody's machine: no keys. */
const BUILDER_IDENTITY: GuestIdentity = { hostname: 'kiste-builder', authorizedKeys: [] };

/** Installs the packages (argv after the script); apt's lists and cache are not kept in the layer. */
const INSTALL = [
  'set -eu',
  'export DEBIAN_FRONTEND=noninteractive',
  'echo "kiste: apt-get update"',
  'apt-get -q update',
  'echo "kiste: apt-get install $*"',
  'apt-get -q -y install --no-install-recommends -- "$@"',
  'apt-get clean',
  'rm -rf /var/lib/apt/lists/*',
].join('\n');

/** What the builder leaves out of the layer: its identity (every machine gets its own at its first boot). */
const FORGET_IDENTITY = [
  'set -e',
  'rm -f /etc/ssh/ssh_host_* /root/.ssh/authorized_keys /var/lib/systemd/random-seed',
  ': > /etc/machine-id',
  ': > /etc/hostname',
  '[ -L /var/lib/dbus/machine-id ] || rm -f /var/lib/dbus/machine-id',
  'journalctl --rotate >/dev/null 2>&1 || true',
  'sync',
].join('\n');

export interface LayerBuildRequest {
  base: HostImage;
  key: string;
  /** `name` or `name=version`, already checked to be Debian package names and versions. */
  packages: string[];
  /** The builder's disk: room for the packages beyond the base's own size. */
  diskMib: number;
  onProgress(step: string, percent: number): void;
  onLog(text: string): void;
  /** Aborted when nobody wants the layer any more: the builder is removed and the build rejects. */
  signal?: AbortSignal;
}

/** What a build tells its caller: the layer's files stay on the host that built it (a worker's control plane never sees its paths). */
export interface BuiltLayer {
  /** `name=version` of the requested packages as installed. */
  packages: string[];
  virtualBytes: number;
}

/** A layer in this host's image folder. */
export interface LayerOnDisk extends BuiltLayer {
  disk: string;
}

/** What the builder needs of the machine host. */
export interface BuilderMachines {
  createDisk(id: string, image: HostImage, diskMib: number | null): Promise<void>;
  boot(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<unknown>;
  agent(id: string): GuestAgent;
  flushGuest(id: string, what: string): Promise<void>;
  stop(id: string, options: { saveSession: boolean }): Promise<{ sessionSaved: boolean }>;
  /** The top layer of a stopped machine's disk. */
  diskTop(id: string): string;
  destroy(id: string): Promise<void>;
}

interface LayerManifest {
  key: string;
  base_version: string;
  packages: string[];
  virtual_bytes: number;
  created_at: string;
}

/** One build of a key and how many requests still wait on it. */
interface SharedBuild {
  layer: Promise<BuiltLayer>;
  waiting: number;
  abort: AbortController;
}

export class LayerBuildCancelled extends Error {
  constructor() {
    super('the build was cancelled');
  }
}

export class LayerBuilder {
  private readonly building = new Map<string, SharedBuild>();

  constructor(
    private readonly machines: BuilderMachines,
    private readonly versionDir: (version: string) => string,
    private readonly logger: { info(object: object, message: string): void; warn(object: object, message: string): void },
  ) {}

  static isBuilder(id: string): boolean {
    return id.startsWith(BUILDER_PREFIX);
  }

  /** Whether a build of this process runs its builder machine as this id now (not a stray). */
  isBuilding(id: string): boolean {
    for (const key of this.building.keys()) if (`${BUILDER_PREFIX}${key.slice(0, 16)}` === id) return true;
    return false;
  }

  layerDir(version: string, key: string): string {
    return join(this.versionDir(version), 'layers', key);
  }

  /** A layer built before (its manifest is written last); null when there is none. */
  async find(version: string, key: string): Promise<LayerOnDisk | null> {
    const dir = this.layerDir(version, key);
    try {
      const manifest = JSON.parse(await readFile(join(dir, 'layer.json'), 'utf8')) as LayerManifest;
      if (manifest.key !== key || !existsSync(join(dir, 'disk.qcow2'))) return null;
      return { disk: join(dir, 'disk.qcow2'), packages: manifest.packages, virtualBytes: manifest.virtual_bytes };
    } catch {
      return null;
    }
  }

  /** Starts the key's build or joins the one running; it is cancelled once every request's signal has aborted. */
  build(request: LayerBuildRequest): Promise<BuiltLayer> {
    let shared = this.building.get(request.key);
    if (!shared) {
      const abort = new AbortController();
      shared = { layer: this.buildOnce(request, abort.signal).finally(() => this.building.delete(request.key)), waiting: 0, abort };
      this.building.set(request.key, shared);
    }
    const build = shared;
    build.waiting += 1;
    const leave = () => {
      build.waiting -= 1;
      if (build.waiting === 0) build.abort.abort();
    };
    if (request.signal?.aborted) leave();
    else request.signal?.addEventListener('abort', leave, { once: true });
    return build.layer;
  }

  /** One build per key across services sharing the image folder (a lock file), the layer checked again under it. */
  private async buildOnce(request: LayerBuildRequest, signal: AbortSignal): Promise<BuiltLayer> {
    const layers = join(this.versionDir(request.base.version), 'layers');
    await mkdir(layers, { recursive: true, mode: 0o755 });
    const lock = await acquireLock(join(layers, `${request.key}.lock`), `building layer ${request.key}`);
    try {
      return await this.buildUnderLock(request, signal);
    } finally {
      await lock.release();
    }
  }

  private async buildUnderLock(request: LayerBuildRequest, signal: AbortSignal): Promise<BuiltLayer> {
    const found = await this.find(request.base.version, request.key);
    if (found) {
      request.onLog(`kiste: the layer ${request.key} was built before; using it\n`);
      return found;
    }
    const id = `${BUILDER_PREFIX}${request.key.slice(0, 16)}`;
    const started = Date.now();
    /** Between steps; a step under way ends early because the builder goes (see below). */
    const stillWanted = () => {
      if (signal.aborted) throw new LayerBuildCancelled();
    };
    // Removing the builder ends whatever step runs in it (the agent's exec, a boot that waits for it).
    const removeBuilder = () => {
      request.onLog('kiste: the build was cancelled; removing the builder\n');
      void this.machines.destroy(id).catch(() => undefined);
    };
    await this.machines.destroy(id); // a builder a killed service left
    stillWanted();
    signal.addEventListener('abort', removeBuilder, { once: true });
    try {
      request.onProgress('booting builder', 5);
      await this.machines.createDisk(id, request.base, request.diskMib);
      stillWanted();
      await this.machines.boot(id, { ...BUILDER_SHAPE, diskMib: 0 }, request.base, BUILDER_IDENTITY);
      stillWanted();
      request.onProgress('installing packages', 20);
      const agent = this.machines.agent(id);
      await this.streamed(agent, ['sh', '-c', INSTALL, 'kiste-build', ...request.packages], request);
      stillWanted();
      const packages = await this.installed(agent, request.packages.map((p) => p.split('=')[0]));
      request.onLog(`kiste: installed ${packages.join(' ')}\n`);
      const forgot = await agent.run({ argv: ['sh', '-c', FORGET_IDENTITY], timeout_ms: 60_000 });
      if (forgot.status !== 'exited' || forgot.exit_code !== 0) throw new Error(`the builder's identity could not be removed: ${forgot.stderr.toString('utf8').trim().slice(-300)}`);
      request.onProgress('publishing layer', 90);
      await this.machines.flushGuest(id, 'a layer');
      await this.machines.stop(id, { saveSession: false });
      stillWanted();
      const layer = await this.publish(request, this.machines.diskTop(id), packages);
      this.logger.info({ key: request.key, base: request.base.version, packages, ms: Date.now() - started }, 'derived image layer built');
      return layer;
    } catch (error) {
      if (signal.aborted) throw new LayerBuildCancelled(); // whatever the removed builder made its step fail with
      throw error;
    } finally {
      signal.removeEventListener('abort', removeBuilder);
      await this.machines.destroy(id).catch((error: Error) => this.logger.warn({ err: error, machine: id }, 'layer builder could not be removed'));
    }
  }

  /** `name=version` of each requested package as dpkg has it installed; every one must be (a name the guest answers is checked, never trusted). */
  private async installed(agent: GuestAgent, names: string[]): Promise<string[]> {
    const listed = await agent.run({ argv: ['dpkg-query', '-W', '-f', '${db:Status-Abbrev}|${Package}=${Version}\\n', '--', ...names], timeout_ms: 60_000 });
    const found = new Map<string, string>();
    for (const line of listed.stdout.toString('utf8').split('\n')) {
      const match = /^ii \|([a-z0-9][a-z0-9+.-]*)=([A-Za-z0-9.+~:-]{1,100})$/.exec(line.trim() === '' ? '' : line);
      if (match && names.includes(match[1])) found.set(match[1], match[2]);
    }
    const missing = names.filter((name) => !found.has(name));
    if (missing.length > 0) throw new Error(`not installed after apt-get: ${missing.join(', ')} (a virtual or removed package?)`);
    return names.map((name) => `${name}=${found.get(name)}`).sort();
  }

  private async streamed(agent: GuestAgent, argv: string[], request: LayerBuildRequest): Promise<void> {
    const handle = await agent.exec({ argv, timeout_ms: BUILD_TIMEOUT_MS });
    let setUp = 0;
    for await (const chunk of handle) {
      const text = chunk.data.toString('utf8');
      request.onLog(text);
      if (text.includes('kiste: apt-get install')) request.onProgress('installing packages', 40);
      setUp += text.split('\nSetting up ').length - 1;
      if (setUp > 0) request.onProgress(`setting up packages (${setUp})`, Math.min(85, 45 + setUp * 2));
    }
    const exit = await handle.exit;
    if (exit.status !== 'exited' || exit.exit_code !== 0) {
      throw new Error(`apt-get failed (${exit.status === 'exited' ? `exit code ${exit.exit_code}` : exit.status})`);
    }
  }

  /**
   * Copies the builder's top layer into the image folder (public, read-only) and writes its manifest
   * last. The builder's QEMU could have written the header, and the layer is shared by every account's
   * machines made from it: the copy (root's now) must be a plain qcow2 layer of the expected size on
   * the base version's disk, with no external data file.
   */
  private async publish(request: LayerBuildRequest, top: string, packages: string[]): Promise<LayerOnDisk> {
    const dir = this.layerDir(request.base.version, request.key);
    const building = `${dir}.building`;
    await rm(building, { recursive: true, force: true });
    await mkdir(building, { recursive: true, mode: 0o755 });
    const disk = join(building, 'disk.qcow2');
    await copyFile(top, disk);
    await chmod(disk, 0o644);
    const header = await qcow2Header(disk);
    const baseDisk = resolve(this.versionDir(request.base.version), 'disk.qcow2');
    const unfit = headerProblem(header); // the rule every chain file is read by
    const problem = unfit ? `it ${unfit}`
      : !header['backing-filename'] || !isAbsolute(header['backing-filename']) || resolve(header['backing-filename']) !== baseDisk ? `it does not back onto ${baseDisk}`
        : header['backing-filename-format'] !== 'qcow2' ? 'its backing file is not named as qcow2'
          : header['virtual-size'] !== request.diskMib * MIB ? `its size is ${header['virtual-size']} bytes, not ${request.diskMib} MiB`
            : null;
    if (problem) {
      await rm(building, { recursive: true, force: true });
      throw new Error(`the builder's disk cannot become a layer: ${problem}`);
    }
    const manifest: LayerManifest = { key: request.key, base_version: request.base.version, packages, virtual_bytes: header['virtual-size'], created_at: new Date().toISOString() };
    await writeFile(join(building, 'layer.json'), `${JSON.stringify(manifest, null, 2)}\n`, { mode: 0o644 });
    await chmod(building, 0o755);
    await chmod(join(dir, '..'), 0o755).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
    await rename(building, dir);
    request.onProgress('ready', 100);
    return { disk: join(dir, 'disk.qcow2'), packages, virtualBytes: header['virtual-size'] };
  }
}
