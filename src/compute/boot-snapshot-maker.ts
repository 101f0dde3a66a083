// Makes boot snapshots in the background: a template machine of the configuration boots to ready
// (and settled: the desktop up, for images with a screen), flushes its file systems, is stopped
// with its memory saved, and its files become the snapshot (BootSnapshotStore.publish). One making
// per configuration at a time, in this process (a map of promises) and across services sharing
// the image folder (a lock file); a failure is logged and creates go on booting cold.
import { isAbsolute } from 'node:path';
import type { BootSnapshot, BootSnapshotStore, SnapshotShape } from './boot-snapshots';
import type { GuestIdentity, HostImage, MachineShape } from './machine-host';
import { qcow2Header } from './qemu';

/** What the maker needs of the machine host to run a template. */
export interface TemplateMachines {
  /** A disk on the image at the image's own size (copies grow from it). */
  createImageSizedDisk(id: string, image: HostImage): Promise<void>;
  boot(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<unknown>;
  flushGuest(id: string): Promise<void>;
  stop(id: string, options: { saveSession: boolean }): Promise<{ sessionSaved: boolean }>;
  /** The files of a stopped machine's saved session and disk top. */
  savedFiles(id: string): { disk: string; memoryFile: string; stateFile: string; serialLog: string };
  destroy(id: string): Promise<void>;
}

/** A template boots as nobody's machine: no keys, a neutral name (every copy gets its own). */
const TEMPLATE_IDENTITY: GuestIdentity = { hostname: 'kiste', authorizedKeys: [] };

export interface MakerSettings {
  /** Waits until everything the image starts is up beyond SSH and the agent. */
  templateSettled?: (id: string, image: HostImage) => Promise<void>;
  logger: { info(object: object, message: string): void; warn(object: object, message: string): void };
}

export class BootSnapshotMaker {
  private readonly making = new Map<string, Promise<BootSnapshot | null>>();
  /** The ids templates run as while they are made (a removal of strays keeps them). */
  private readonly templates = new Set<string>();
  private stopped = false;

  constructor(
    private readonly store: BootSnapshotStore,
    private readonly machines: TemplateMachines,
    private readonly settings: MakerSettings,
  ) {}

  /** The snapshot of a configuration: the existing one, the one being made, or a new making. Null when the making failed. */
  make(image: HostImage, shape: SnapshotShape): Promise<BootSnapshot | null> {
    const existing = this.store.find(image, shape);
    if (existing) return Promise.resolve(existing);
    const key = this.store.key(image, shape);
    let making = this.making.get(key);
    if (!making) {
      making = this.makeUnderLock(image, shape)
        .catch((error: Error) => {
          this.settings.logger.warn({ err: error, image: image.version, shape }, 'boot snapshot could not be made');
          return null;
        })
        .finally(() => this.making.delete(key));
      this.making.set(key, making);
    }
    return making;
  }

  /** Makings in progress give up at their next step (service shutdown). */
  stop(): void {
    this.stopped = true;
  }

  get isStopped(): boolean {
    return this.stopped;
  }

  /** Whether a template of this process runs as this machine id now. */
  isMaking(id: string): boolean {
    return this.templates.has(id);
  }

  private async makeUnderLock(image: HostImage, shape: SnapshotShape): Promise<BootSnapshot | null> {
    const lock = await this.store.lock(image, shape);
    try {
      const ready = this.store.find(image, shape); // another service sharing the images made it meanwhile
      if (ready || this.stopped) return ready;
      return await this.makeNow(image, shape);
    } finally {
      await lock.release();
    }
  }

  private async makeNow(image: HostImage, shape: SnapshotShape): Promise<BootSnapshot | null> {
    const id = this.store.templateId(image, shape);
    const started = Date.now();
    await this.machines.destroy(id); // a template a killed service left
    this.templates.add(id);
    try {
      await this.machines.createImageSizedDisk(id, image);
      await this.machines.boot(id, { ...shape, diskMib: 0 }, image, TEMPLATE_IDENTITY);
      await this.settings.templateSettled?.(id, image);
      await this.machines.flushGuest(id);
      if (this.stopped) return null;
      const { sessionSaved } = await this.machines.stop(id, { saveSession: true });
      if (!sessionSaved) throw new Error('the template\'s memory could not be saved');
      const files = this.machines.savedFiles(id);
      const header = await qcow2Header(files.disk);
      // Moved into the image folder: a relative backing name would then point elsewhere.
      if (!header['backing-filename'] || !isAbsolute(header['backing-filename'])) throw new Error(`the template disk ${files.disk} does not back onto an absolute image path`);
      const snapshot = this.store.publish(image, shape, { ...files, diskBytes: header['virtual-size'] }, Date.now() - started);
      this.settings.logger.info({ image: image.version, shape, key: snapshot.key, ms: Date.now() - started }, 'boot snapshot ready');
      return snapshot;
    } finally {
      await this.machines.destroy(id).catch((error: Error) => this.settings.logger.warn({ err: error, machine: id }, 'boot snapshot template could not be removed'));
      this.templates.delete(id);
    }
  }
}
