// Disks are qcow2 chains: an image's base disk at the bottom, copy-on-write overlays on top.
// The guest writes only to the top ("active") layer; every layer below it is read-only.
//
// Offline (no QEMU running on the disk):
//   createOverlay(base, overlay)   base.qcow2 <- overlay.qcow2       instant, sparse, any size >= base
//   a fork of a stopped disk is just another overlay on the same file.
//
// Live fork of a running machine (liveFork):
//   before:  base.qcow2 <- vm.qcow2 (active, guest writes here)
//   1. we create vm.1.qcow2 with backing vm.qcow2 (QEMU may not create files: the layers' folder is
//      not its own), then blockdev-snapshot-sync (mode existing) switches the guest to it atomically. vm.qcow2 is now frozen: nothing writes it again (crash-consistent: what the
//      guest had flushed to its disk at that instant; its page cache is not included).
//          base.qcow2 <- vm.qcow2 (frozen) <- vm.1.qcow2 (active)
//   2. qemu-img create -b vm.qcow2 fork.qcow2:
//          base.qcow2 <- vm.qcow2 (frozen) <- fork.qcow2 (the fork's active layer)
//   Source and fork now share vm.qcow2 read-only and diverge from there; the time taken does not
//   depend on the disk's size. The caller must record the source's new active file (vm.1.qcow2):
//   its next cold boot must open that file, not vm.qcow2.
//
// Chains grow by one layer per live fork or checkpoint. Compaction keeps them bounded:
//   - streamIntoActive (block-stream): copies the data of the layers between `base` and the active
//     layer into the active layer and drops them from the chain;
//   - commitIntoBase (block-commit): merges a layer into the one below it and drops it.
//   A layer may only be dropped, and its file deleted, when no other chain uses it (forks share
//   layers): that bookkeeping belongs to the caller. Never commit into a shared layer (the image's
//   base disk, or a frozen layer a fork still uses).
//
// "Has the disk changed since the last checkpoint": a dirty bitmap on the active node records
// every cluster written after it was added (or cleared); its `count` is the number of dirty bytes.
// A bitmap lives on one node: after a snapshot the guest writes to the new top, so add a fresh
// bitmap there. Non-persistent bitmaps vanish when QEMU exits; treat a fresh boot as "changed".
import { execFile } from 'node:child_process';
import { rm } from 'node:fs/promises';
import { promisify } from 'node:util';
import { DISK_DEVICE } from './command-line';
import type { QmpClient, QmpEvent } from './qmp-client';
import { BlockJobEventShape, NamedBlockNodesShape, QueryBlockShape, type NamedBlockNode } from './qmp-shapes';

const run = promisify(execFile);
/** qemu-img work on headers alone, and work that copies a disk's data: past these it is killed (a hostile file cannot hold it forever). */
const QUICK_MS = 60_000;
const COPY_MS = 30 * 60_000;

export function qemuImgBinary(): string {
  return process.env.KISTE_QEMU_IMG_BINARY ?? 'qemu-img';
}

/** An empty qcow2 disk. */
export async function createDisk(path: string, sizeBytes: number): Promise<void> {
  await run(qemuImgBinary(), ['create', '-q', '-f', 'qcow2', path, String(sizeBytes)], { timeout: QUICK_MS });
}

/**
 * A copy-on-write overlay on `backing` (a qcow2 file, stored by absolute path as given). Without
 * sizeBytes the overlay has the backing file's size; with it, the guest sees a bigger disk.
 */
export async function createOverlay(backing: string, overlay: string, options: { sizeBytes?: number; unsafe?: boolean } = {}): Promise<void> {
  // unsafe (with sizeBytes): the backing file is not opened, as it cannot be while a QEMU writes it.
  const args = ['create', '-q', '-f', 'qcow2', '-F', 'qcow2', '-b', backing, ...(options.unsafe ? ['-u'] : []), overlay];
  if (options.sizeBytes !== undefined) args.push(String(options.sizeBytes));
  await run(qemuImgBinary(), args, { timeout: QUICK_MS });
}

export interface ImageInfo {
  filename: string;
  format: string;
  'virtual-size': number;
  'actual-size'?: number;
  'backing-filename'?: string;
  'full-backing-filename'?: string;
  'backing-filename-format'?: string;
  'dirty-flag'?: boolean;
  /** qcow2 details; `data-file` is set when the image keeps its data in another file. */
  'format-specific'?: { type: string; data?: { 'data-file'?: string } };
}

/**
 * The chain from `path` down to its base, top first. `-U` (force share): the image may be open in
 * a running QEMU, which holds locks on it; we only read metadata.
 */
export async function backingChain(path: string): Promise<ImageInfo[]> {
  const { stdout } = await run(qemuImgBinary(), ['info', '-U', '--backing-chain', '--output=json', path]);
  const parsed = JSON.parse(stdout) as ImageInfo | ImageInfo[];
  return Array.isArray(parsed) ? parsed : [parsed];
}

/**
 * One qcow2 file's header, without opening its backing file (a name read from a header the
 * machine's QEMU could have written is checked before anything opens it: see LayerStore.filesOf).
 */
export async function qcow2Header(path: string): Promise<ImageInfo> {
  const { stdout } = await run(qemuImgBinary(), ['info', '-U', '-f', 'qcow2', '--output=json', path], { timeout: 30_000 });
  return JSON.parse(stdout) as ImageInfo;
}

/** Sets the backing file a qcow2 header names, reading neither the old nor the new backing file. */
export async function rebaseUnsafe(overlay: string, newBacking: string): Promise<void> {
  await run(qemuImgBinary(), ['rebase', '-q', '-u', '-f', 'qcow2', '-F', 'qcow2', '-b', newBacking, overlay], { timeout: QUICK_MS });
}

/** Offline compaction: make `overlay` independent of the layers between it and `newBacking`. */
export async function rebaseOffline(overlay: string, newBacking: string): Promise<void> {
  // Safe mode (no -u): copies every cluster where the old and new backing chains differ.
  await run(qemuImgBinary(), ['rebase', '-q', '-f', 'qcow2', '-F', 'qcow2', '-b', newBacking, overlay], { timeout: COPY_MS });
}

export interface ActiveLayer {
  node: string;
  file: string;
}

/** The node and file the guest's disk currently writes to. */
export async function activeLayer(qmp: QmpClient, device = DISK_DEVICE): Promise<ActiveLayer> {
  const blocks = await qmp.execute('query-block', undefined, { result: QueryBlockShape });
  const block = blocks.find((b) => b.qdev === device || b.qdev?.startsWith(`/machine/peripheral/${device}/`));
  if (!block?.inserted) throw new Error(`no disk attached to device ${device}`);
  return { node: block.inserted['node-name'], file: block.inserted.file };
}

export interface SnapshotResult {
  /** The previous active layer, now read-only and stable. */
  frozen: ActiveLayer;
  /** The new active layer the guest writes to. */
  active: ActiveLayer;
}

export interface SnapshotOptions {
  newFile: string;
  newNode: string;
  device?: string;
  /** Runs on the new layer file before QEMU opens it (the jail hands it to the machine's user). */
  prepareFile?: (path: string) => Promise<void> | void;
}

/** Puts a new, empty active layer on top of the running disk. */
export async function snapshotActive(qmp: QmpClient, options: SnapshotOptions): Promise<SnapshotResult> {
  const frozen = await activeLayer(qmp, options.device);
  await createOverlay(frozen.file, options.newFile, { sizeBytes: await virtualSize(qmp, frozen.node), unsafe: true });
  try {
    await options.prepareFile?.(options.newFile);
    await qmp.execute('blockdev-snapshot-sync', {
      'node-name': frozen.node,
      'snapshot-file': options.newFile,
      'snapshot-node-name': options.newNode,
      format: 'qcow2',
      mode: 'existing',
    });
  } catch (error) {
    await rm(options.newFile, { force: true });
    throw error;
  }
  return { frozen, active: await activeLayer(qmp, options.device) };
}

async function virtualSize(qmp: QmpClient, node: string): Promise<number> {
  const nodes = await namedBlockNodes(qmp);
  const found = nodes.find((n) => n['node-name'] === node);
  if (!found) throw new Error(`no block node ${node}`);
  return found.image['virtual-size'];
}

/** Copy-on-write fork of a running machine's disk; see the top of this file for the chain. */
export async function liveFork(
  qmp: QmpClient,
  options: {
    newActiveFile: string; newActiveNode: string; forkFile: string; forkSizeBytes?: number; device?: string; prepareFile?: SnapshotOptions['prepareFile'];
    /**
     * Checks the file QEMU says it froze before anything opens it (QEMU is not trusted) and answers
     * the fork's size: the overlay is then made without opening that file at all.
     */
    frozenSize?: (file: string) => Promise<number>;
  },
): Promise<SnapshotResult & { fork: string }> {
  const snapshot = await snapshotActive(qmp, { newFile: options.newActiveFile, newNode: options.newActiveNode, device: options.device, prepareFile: options.prepareFile });
  const checkedSize = options.frozenSize ? await options.frozenSize(snapshot.frozen.file) : undefined;
  await createOverlay(snapshot.frozen.file, options.forkFile, { sizeBytes: options.forkSizeBytes ?? checkedSize, unsafe: checkedSize !== undefined });
  return { ...snapshot, fork: options.forkFile };
}

export async function addDirtyBitmap(qmp: QmpClient, options: { node: string; name: string; persistent?: boolean }): Promise<void> {
  await qmp.execute('block-dirty-bitmap-add', { node: options.node, name: options.name, persistent: options.persistent ?? false });
}

export async function removeDirtyBitmap(qmp: QmpClient, options: { node: string; name: string }): Promise<void> {
  await qmp.execute('block-dirty-bitmap-remove', { node: options.node, name: options.name });
}

/** Starts a new "since the last checkpoint" period. */
export async function clearDirtyBitmap(qmp: QmpClient, options: { node: string; name: string }): Promise<void> {
  await qmp.execute('block-dirty-bitmap-clear', { node: options.node, name: options.name });
}

/** Every block node, flat (each layer's format and file node). */
function namedBlockNodes(qmp: QmpClient): Promise<NamedBlockNode[]> {
  return qmp.execute('query-named-block-nodes', { flat: true }, { result: NamedBlockNodesShape });
}

/** Bytes written since the bitmap was added or cleared (0 = unchanged); undefined if no such bitmap. */
export async function dirtyBitmapCount(qmp: QmpClient, options: { node: string; name: string }): Promise<number | undefined> {
  // query-named-block-nodes sees bitmaps on any node; query-block only on a device's top node.
  const nodes = await namedBlockNodes(qmp);
  const node = nodes.find((n) => n['node-name'] === options.node);
  return node?.['dirty-bitmaps']?.find((b) => b.name === options.name)?.count;
}

/** Node names of the chain under the device, active layer first (for compaction decisions). */
export async function chainNodes(qmp: QmpClient, device = DISK_DEVICE): Promise<ActiveLayer[]> {
  const nodes = await namedBlockNodes(qmp);
  const chain: ActiveLayer[] = [];
  let current: ActiveLayer | undefined = await activeLayer(qmp, device);
  while (current) {
    chain.push(current);
    const node = nodes.find((n) => n['node-name'] === current!.node);
    const backing = node?.image['backing-filename'];
    const below = backing ? nodes.find((n) => n.drv === 'qcow2' && n.file === backing && !chain.some((c) => c.node === n['node-name'])) : undefined;
    current = below ? { node: below['node-name'], file: below.file } : undefined;
  }
  return chain;
}

/**
 * block-stream: pulls the data of every layer above `baseNode` (or of the whole chain, without
 * baseNode) into the active layer, which then backs directly onto `baseNode`.
 */
export async function streamIntoActive(qmp: QmpClient, options: { jobId: string; baseNode?: string; device?: string; timeoutMs?: number }): Promise<void> {
  const active = await activeLayer(qmp, options.device);
  const done = waitForJob(qmp, options.jobId, options.timeoutMs);
  const args: Record<string, unknown> = { 'job-id': options.jobId, device: active.node };
  if (options.baseNode) args['base-node'] = options.baseNode;
  await startJob(qmp, 'block-stream', args, done);
  await done;
}

/**
 * block-commit: merges `topNode` (and the layers between it and `baseNode`) into `baseNode`.
 * When topNode is the active layer this is an "active commit": the job waits in READY until we
 * complete it, then the guest writes to baseNode.
 */
export async function commitIntoBase(qmp: QmpClient, options: { jobId: string; topNode: string; baseNode: string; device?: string; timeoutMs?: number }): Promise<void> {
  const active = await activeLayer(qmp, options.device);
  const isActiveCommit = options.topNode === active.node;
  // Active commit: once the base has caught up (READY), complete the job to pivot the guest onto it.
  const onReady = isActiveCommit ? () => qmp.execute('block-job-complete', { device: options.jobId }) : undefined;
  const done = waitForJob(qmp, options.jobId, options.timeoutMs, onReady);
  const args: Record<string, unknown> = { 'job-id': options.jobId, device: active.node, 'base-node': options.baseNode };
  if (!isActiveCommit) args['top-node'] = options.topNode;
  await startJob(qmp, 'block-commit', args, done);
  await done;
}

async function startJob(qmp: QmpClient, command: string, args: Record<string, unknown>, done: Promise<unknown>): Promise<void> {
  try {
    await qmp.execute(command, args);
  } catch (error) {
    done.catch(() => undefined); // the job never started: nobody will await its completion
    throw error;
  }
}

/**
 * Resolves on BLOCK_JOB_COMPLETED for the job; rejects when it completed with an error, was
 * cancelled, timed out or the connection closed. One listener, removed whatever happens.
 * onReady runs on BLOCK_JOB_READY (jobs that need a manual completion).
 */
function waitForJob(qmp: QmpClient, jobId: string, timeoutMs = 600_000, onReady?: () => Promise<unknown>): Promise<QmpEvent> {
  return new Promise((resolve, reject) => {
    let readied = false;
    const finish = (error: Error | undefined, event?: QmpEvent): void => {
      clearTimeout(timer);
      qmp.off('event', onEvent);
      qmp.off('close', onClose);
      if (error) reject(error);
      else resolve(event!);
    };
    const onEvent = (e: QmpEvent): void => {
      if (!e.event.startsWith('BLOCK_JOB_')) return;
      const data = BlockJobEventShape.parse(e.data);
      if (!data.ok || data.value.device !== jobId) return;
      if (e.event === 'BLOCK_JOB_COMPLETED') finish(data.value.error ? new Error(`block job ${jobId} failed: ${data.value.error.slice(0, 2000)}`) : undefined, e);
      else if (e.event === 'BLOCK_JOB_CANCELLED') finish(new Error(`block job ${jobId} was cancelled`));
      else if (e.event === 'BLOCK_JOB_READY' && onReady && !readied) {
        // Once: a QEMU repeating READY must not queue a completion command per event.
        readied = true;
        onReady().catch((error: Error) => finish(error));
      }
    };
    const onClose = (): void => finish(new Error(`block job ${jobId}: QMP connection closed`));
    const timer = setTimeout(() => finish(new Error(`block job ${jobId} did not complete within ${timeoutMs} ms`)), timeoutMs);
    qmp.on('event', onEvent);
    qmp.on('close', onClose);
  });
}
