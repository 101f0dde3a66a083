// The images of a kiste-worker as the control plane holds them (issue 22): HostImages over
// worker-api.yaml. The domain reads the served image and its build synchronously, so they are kept
// here and refreshed from GetImageState (the service calls refresh() now and then; a layer build
// and a collection refresh too). Manifests are kept per version: a published version never
// changes. A layer build is a BuildLayer stream whose every message is checked against the spec
// before the caller's callbacks see it. A worker out of reach is the client's WorkerUnreachableError.
import type { RawData, WebSocket } from 'ws';
import type { ImageManifest } from '../../images';
import type { components } from '../generated/worker-api';
import { bufferOf } from '../net/websocket';
import { peerText } from '../protocol/peer-input';
import { LayerBuildCancelled, type BuiltLayer, type LayerBuildRequest } from './layer-builder';
import type { HostImage, HostImages, ImageBuildState, ImageProfile } from './machine-host';
import { WorkerCallError, WorkerProtocolError, WorkerTimeoutError, WorkerUnreachableError, type WorkerCalls } from './worker-client';
import { fromWire, parseStreamMessage, wire } from './worker-wire';

type Wire = components['schemas'];

/** worker-api.yaml's ImageVersion: anything else names no version on a worker. */
const IMAGE_VERSION = /^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$/;
/** Manifests kept (each up to the client's 1 MiB answer bound); the oldest read goes first. */
const MANIFESTS_KEPT = 16;
/** Removing versions waits for a build under way to start its snapshot renewal, and removes whole folders. */
const COLLECT_MS = 15 * 60_000;
/** Longer than the builder's own bounds (a boot under TCG, apt's 45 minutes, the copy): a stream past it is given up. */
const LAYER_BUILD_MS = 90 * 60_000;
/** Before the first refresh: what K06 says. */
const NOT_READ_YET: ImageBuildState = { state: 'building', step: null, error: null };

export class RemoteImages implements HostImages {
  private readonly states = new Map<ImageProfile, { current: HostImage | null; build: ImageBuildState }>();
  /** Per profile, the latest refresh asked: an older answer arriving later is not kept. */
  private readonly refreshes = new Map<ImageProfile, number>();
  private readonly manifests = new Map<string, ImageManifest>();

  constructor(private readonly worker: WorkerCalls) {}

  /** Asks the worker for the profile's image and build now; the served image, or null while none is ready. */
  async refresh(profile: ImageProfile): Promise<HostImage | null> {
    const round = (this.refreshes.get(profile) ?? 0) + 1;
    this.refreshes.set(profile, round);
    const state = (await this.worker.call('GET', `/w1/images/${profile}`, 'GetImageState')) as Wire['ImageState'];
    const current = state.current ? fromWire.image(state.current) : null;
    if (this.refreshes.get(profile) === round) {
      // The step and error go into API messages (K06): no control characters from the worker.
      const build = fromWire.buildState(state.build);
      this.states.set(profile, { current, build: { ...build, step: build.step === null ? null : peerText(build.step, 2000), error: build.error === null ? null : peerText(build.error, 2000) } });
    }
    return current;
  }

  currentImage(profile: ImageProfile): HostImage | null {
    return this.states.get(profile)?.current ?? null;
  }

  imageBuildState(profile: ImageProfile): ImageBuildState {
    return this.states.get(profile)?.build ?? NOT_READ_YET;
  }

  async imageManifest(image: HostImage): Promise<ImageManifest | null> {
    const kept = this.manifests.get(image.version);
    if (kept) return kept;
    if (!IMAGE_VERSION.test(image.version)) return null;
    const answer = (await this.worker.call('GET', `/w1/image-versions/${image.version}/manifest`, 'GetImageManifest')) as { manifest: Wire['ImageManifest'] | null };
    if (!answer.manifest) return null;
    if (answer.manifest.version !== image.version) throw new WorkerProtocolError(`GetImageManifest: asked for ${image.version}, the manifest is another version's`);
    const manifest = fromWire.manifest(answer.manifest);
    this.manifests.set(image.version, manifest);
    if (this.manifests.size > MANIFESTS_KEPT) this.manifests.delete(this.manifests.keys().next().value!);
    return manifest;
  }

  /**
   * Removes the worker's image versions nobody needs: call it once a refresh shows a new ready
   * version, with the versions the records keep (private images' layers sit on them). Returns
   * those removed.
   */
  async collectImages(profile: ImageProfile, keep: Iterable<string>): Promise<string[]> {
    // A version outside the protocol's alphabet is no folder the worker could remove.
    const body: Wire['ImageVersions'] = { versions: [...keep].filter((version) => IMAGE_VERSION.test(version)) };
    const removed = ((await this.worker.call('POST', `/w1/images/${profile}/collect`, 'CollectImages', body, COLLECT_MS)) as Wire['ImageVersions']).versions;
    void this.refresh(profile).catch(() => undefined);
    return removed;
  }

  async buildLayer(request: LayerBuildRequest): Promise<BuiltLayer> {
    if (request.signal?.aborted) throw new LayerBuildCancelled();
    const start = wire.layerBuildStart(request);
    try {
      const followed = await this.worker.upgrade('/w1/layers/build', 'BuildLayer', (ws) => ({ built: followBuild(ws, start, request) }));
      return await followed.built;
    } finally {
      void this.refresh(request.base.profile).catch(() => undefined);
    }
  }
}

/** Sends the start, passes progress and log on as they come, and settles with the outcome (closing the stream gives the build up on the worker). */
function followBuild(ws: WebSocket, start: Wire['LayerBuildStart'], request: LayerBuildRequest): Promise<BuiltLayer> {
  return new Promise<BuiltLayer>((resolve, reject) => {
    let settled = false;
    const settle = (outcome: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      request.signal?.removeEventListener('abort', giveUp);
      if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) ws.close(1000);
      outcome();
    };
    const broken = (reason: string) => settle(() => reject(new WorkerProtocolError(`BuildLayer: ${reason}`)));
    const giveUp = () => settle(() => reject(new LayerBuildCancelled()));
    const deadline = setTimeout(() => {
      ws.terminate();
      settle(() => reject(new WorkerTimeoutError(`BuildLayer: no outcome within ${LAYER_BUILD_MS / 60_000} minutes`)));
    }, LAYER_BUILD_MS);
    request.signal?.addEventListener('abort', giveUp, { once: true });
    ws.on('error', () => undefined);
    ws.on('close', () => settle(() => reject(request.signal?.aborted ? new LayerBuildCancelled() : new WorkerUnreachableError('BuildLayer: the worker closed the build\'s stream before its end'))));
    ws.on('message', (data: RawData, isBinary: boolean) => {
      if (settled) return;
      if (isBinary) return broken('a binary message');
      const message = parseStreamMessage('LayerBuildMessage', bufferOf(data));
      if (!message.ok) return broken(`a message that ${message.reason}`);
      const fitting = message.value;
      if (fitting.type === 'progress') return request.onProgress(peerText(fitting.step, 200), fitting.percent);
      if (fitting.type === 'log') return request.onLog(fitting.text);
      if (fitting.type === 'built') return settle(() => resolve({ packages: fitting.packages, virtualBytes: fitting.virtual_bytes }));
      settle(() => reject(fitting.cancelled ? new LayerBuildCancelled() : new WorkerCallError(500, 'failed', peerText(fitting.message, 2000))));
    });
    if (request.signal?.aborted) return giveUp(); // aborted while the stream opened
    ws.send(JSON.stringify(start));
  });
}
