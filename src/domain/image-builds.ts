// Builds of private images' derived layers, in the background: the machine host builds the layer in a
// builder machine; progress, the log (last 256 KiB) and the outcome go to the image's row, and
// `image.built` marks the end. Images still `building` after a restart, or when the compute worker is
// back after it went away during their build, are built again (a layer built before is found by its
// key at once).
// One builder machine runs at a time on this host. Builds wait in a queue that takes accounts in turn
// (fair-queue.ts), and an account has at most IMAGE_BUILDS_PER_ACCOUNT builds queued or running
// (409 L11), so one account queuing many builds neither starves another's nor grows the queue
// without bound.
import type { BuiltLayer, LayerBuildRequest } from '../compute/layer-builder';
import { cameFromUnreachableHost, type HostImage } from '../compute/machine-host';
import { KisteError } from '../errors';
import { appendEvent } from '../store/events';
import type { Image, ImageStore } from '../store/images';
import { AccountSlots, type Slot } from './account-slots';
import type { Clock } from './clock';
import { FairQueue } from './fair-queue';
import { OutputTail } from './output-tail';
import type { Transactions } from './transactions';

const LOG_KEPT_BYTES = 256 * 1024;
const ERROR_TAIL_BYTES = 2048;
const SAVE_EVERY_MS = 2000;
/** Room in the builder's disk beyond the base image's own size. */
const BUILDER_EXTRA_MIB = 2048;
/** The step of a build that waits for the compute worker to come back. */
export const WAITING_FOR_COMPUTE = 'waiting for the compute worker';
/** Builds an account may have queued or running at once. */
export const IMAGE_BUILDS_PER_ACCOUNT = 4;

/** A derived layer's disk size: its file system was grown to the builder's disk, so no machine on it has less. */
export function layerDiskMib(baseDiskMib: number): number {
  return baseDiskMib + BUILDER_EXTRA_MIB;
}

export interface LayerHost {
  /** The profile the universal image is built from (a layer's base is a version of it). */
  profile: HostImage['profile'];
  /** The base version's disk size in MiB (its manifest), null when the version is gone. */
  diskMib(version: string): Promise<number | null>;
  buildLayer(request: LayerBuildRequest): Promise<BuiltLayer>;
}

interface Build {
  image: Image;
  cancel: AbortController;
  slot: Slot;
  /** Settles `done`. */
  finished(): void;
}

export class ImageBuilds {
  /** Builds queued or running, by image id, each with what cancels it. */
  private readonly running = new Map<string, { done: Promise<void>; cancel: AbortController }>();
  /** Builds waiting for the builder (step `queued`), accounts in turn. */
  private readonly queue = new FairQueue<Build>();
  private busy = false;
  private readonly slots: AccountSlots;

  constructor(
    private readonly transactions: Transactions,
    private readonly store: ImageStore,
    private readonly host: LayerHost,
    private readonly clock: Clock,
    private readonly logger: { warn(object: object, message: string): void },
    perAccount = IMAGE_BUILDS_PER_ACCOUNT,
  ) {
    this.slots = new AccountSlots(perAccount);
  }

  /**
   * A place for one more build of the account (409 L11 when it has the most queued or running):
   * taken before the image is made, so creates at once cannot pass the cap together; given to
   * build(), or released when the image was not made after all.
   */
  reserve(accountId: string): Slot {
    return this.slots.take(accountId, () => new KisteError('L11', { message: `The account already has ${this.slots.perAccount} image builds queued or running` }));
  }

  /** Queues the image's build (a build resumed at start takes a place whatever the account holds). */
  build(image: Image, slot: Slot = this.slots.hold(image.accountId)): void {
    if (this.running.has(image.id)) return slot.release();
    void this.store.recordBuild(image.id, { buildStep: 'queued' }).catch(() => undefined);
    let finished!: () => void;
    const done = new Promise<void>((resolve) => (finished = resolve));
    const build: Build = { image, cancel: new AbortController(), slot, finished };
    this.running.set(image.id, { done, cancel: build.cancel });
    this.queue.push(image.accountId, build);
    this.next();
  }

  /** The image was deleted: a queued build leaves the queue, a running one stops and its builder goes. */
  cancel(imageId: string): void {
    for (const build of this.queue.remove((queued) => queued.image.id === imageId)) this.settle(build);
    this.running.get(imageId)?.cancel.abort();
  }

  /** Builds the account has queued or running. */
  count(accountId: string): number {
    return this.slots.count(accountId);
  }

  /** Starts the next queued build when the builder is free. */
  private next(): void {
    if (this.busy) return;
    const build = this.queue.shift();
    if (!build) return;
    this.busy = true;
    void this.run(build.image, build.cancel.signal)
      .catch((error: Error) => this.logger.warn({ err: error, image: build.image.id }, 'image build ended unexpectedly'))
      .finally(() => {
        this.settle(build);
        this.busy = false;
        this.next();
      });
  }

  private settle(build: Build): void {
    this.running.delete(build.image.id);
    build.slot.release();
    build.finished();
  }

  /** At start, and when the compute worker is back: the builds a stopped service or a lost worker left unfinished. */
  async resume(): Promise<void> {
    for (const image of await this.store.building()) this.build(image);
  }

  /** For tests and shutdown: the builds in progress. */
  settled(): Promise<unknown> {
    return Promise.allSettled([...this.running.values()].map((build) => build.done));
  }

  private async run(image: Image, signal: AbortSignal): Promise<void> {
    const started = this.clock.now();
    const log = new OutputTail(LOG_KEPT_BYTES);
    let step = 'starting';
    let progress = 0;
    let lastSave = 0;
    const save = async (force: boolean) => {
      if (!force && Date.now() - lastSave < SAVE_EVERY_MS) return;
      lastSave = Date.now();
      await this.store.recordBuild(image.id, { buildStep: step, buildProgress: progress, buildLog: log.text, buildLogTruncated: log.truncated });
    };
    const version = image.baseVersion ?? '';
    try {
      const baseMib = await this.host.diskMib(version);
      if (baseMib === null) throw new Error(`the base image version ${version} is not on this server any more`);
      const stillWanted = await this.store.recordBuild(image.id, { buildStartedAt: started, buildFinishedAt: null, buildError: null, buildStep: step, buildProgress: 0 });
      if (!stillWanted || signal.aborted) return; // deleted while it waited its turn: no builder boots for it
      const built = await this.host.buildLayer({
        // The builder starts from the version's own files (found by version); no content key is needed.
        base: { profile: this.host.profile, version, artifactKey: version, layer: null },
        key: image.artifactKey,
        packages: (image.buildPackages as unknown as string[] | null) ?? [],
        diskMib: layerDiskMib(baseMib),
        signal,
        onProgress: (nextStep, percent) => {
          step = nextStep;
          progress = Math.max(progress, percent);
          void save(false).catch(() => undefined);
        },
        onLog: (text) => {
          log.append(text);
          void save(false).catch(() => undefined);
        },
      });
      await this.finish(image, { status: 'ready', buildStep: 'ready', buildProgress: 100, buildPackages: built.packages, buildLog: log.text, buildLogTruncated: log.truncated, buildError: null });
    } catch (error) {
      if (signal.aborted) return; // deleted: there is no row to tell
      if (cameFromUnreachableHost(error)) {
        // Not the build's failure: the image stays `building` and is queued again once the worker is back (resume()).
        this.logger.warn({ err: error, image: image.id }, 'derived image layer build waits for the compute worker');
        await this.store.recordBuild(image.id, { buildStep: WAITING_FOR_COMPUTE }).catch(() => undefined);
        return;
      }
      const reason = error instanceof Error ? error.message : String(error);
      const tail = log.end(ERROR_TAIL_BYTES);
      this.logger.warn({ err: error, image: image.id }, 'derived image layer build failed');
      await this.finish(image, {
        status: 'failed', buildStep: step, buildProgress: progress, buildLog: log.text, buildLogTruncated: log.truncated,
        buildError: tail ? `${reason}; the log ends:\n${tail}` : reason,
      });
    }
  }

  private async finish(image: Image, outcome: Parameters<ImageStore['recordBuild']>[1] & { status: 'ready' | 'failed' }): Promise<void> {
    await this.transactions.run(async (tx) => {
      const recorded = await this.store.recordBuild(image.id, { ...outcome, buildFinishedAt: this.clock.now() }, tx);
      if (!recorded) return; // deleted while it was built
      await appendEvent(tx, image.accountId, { type: 'image.built', resourceType: 'image', resourceId: image.id, data: { name: image.name, status: outcome.status } });
    }).catch((error: Error) => this.logger.warn({ err: error, image: image.id }, 'image build outcome could not be recorded'));
  }
}
