// What a worker serves (worker-api.yaml): each route parses its path and checks its body against
// the spec's validator before the machine host sees it, and answers in the spec's shapes. A machine
// operation that fails answers 500 `failed` with its message (the machine's error shows it).
import type { components } from '../generated/worker-api';
import * as validators from '../generated/worker-validators';
import type { ImageProfile, MachineHost } from '../compute/machine-host';
import { fromWire, wire, WORKER_PROTOCOL_VERSION } from '../compute/worker-wire';
import { AgentCallError } from '../compute/agent/errors';
import type { ExecTable } from './agent-streams';
import type { MachineScreens } from '../compute/guest-display';
import type { ImagePreparation } from '../compute/image-preparation';
import type { WorkerOffer } from './worker-config';
import type { MachineReceiver } from './machine-move-streams';
import type { MoveLimits, OutgoingMachine } from '../compute/machine-moves';
import type { WorkerFencing } from './worker-fencing';
import { SCREEN_VIDEO_LIMITS, type ScreenVideoRequest } from '../media/screen-video';

type Wire = components['schemas'];
export type Answer = { status: number; body: unknown };

/** What a worker runs machines on: the machine host and its machines' screens (QemuMachineHost is both). */
export type WorkerHost = MachineHost & MachineScreens & MachineReceiver & { exportMachine(id: string): Promise<OutgoingMachine> };

/** The worker's own image builds: removals wait for what a build started (src/compute/image-preparation.ts). */
export type WorkerImageVersions = Pick<ImagePreparation, 'removeUnused'>;

/** What the worker counts since it started (its metrics, read by the control plane). */
export interface WorkerCounts {
  agentLinksDropped: number;
}

export interface RouteContext {
  host: WorkerHost;
  version: string;
  startedAt: string;
  counts: WorkerCounts;
  execs: ExecTable;
  images: WorkerImageVersions;
  /** What hello says of the worker beyond its version: its TLS certificate and what it offers. */
  identity: { tlsFingerprint: string | null; offer: WorkerOffer };
  fencing: WorkerFencing;
  /** The fencing epoch the request was signed under. */
  epoch: number;
}

interface Route {
  method: string;
  pattern: RegExp;
  /** The spec's operation: a body is read and checked when the spec gives it one (`<operationId>__body`). */
  operationId: string;
  run(context: RouteContext, match: RegExpExecArray, body: unknown, query: URLSearchParams): Promise<unknown>;
}

const ID = '([A-Za-z0-9-]{1,80})';
const SNAPSHOT_ID = '([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})';
const EXEC = '([0-9a-f]{32})';
/** worker-api.yaml's ImageVersion: a letter or digit first, so never `.` or `..`. */
const VERSION = '([A-Za-z0-9][A-Za-z0-9._-]{0,79})';
const PROFILES: readonly ImageProfile[] = ['minimal', 'desktop', 'desktop-lite'];
const done = {};

/** A request the protocol has no answer for (400 bad_request, 404 not_found) or refuses to act on (409 stale_epoch): never a machine's failure. */
class Refusal extends Error {
  constructor(
    readonly status: 400 | 404 | 409,
    message: string,
  ) {
    super(message);
  }
}

/** The operations any control plane may ask whatever the worker's epoch: who it is, and its adoption. */
const UNFENCED = new Set(['WorkerHello', 'WorkerCounters', 'WorkerChecks', 'FenceWorker']);

/** The refusal of a command of another epoch than the worker's. */
export function staleEpoch(fencing: WorkerFencing, epoch: number): Answer {
  return failure(409, 'stale_epoch', fencing.epoch === 0
    ? 'this run of the worker has not been adopted yet'
    : `the request was sent under epoch ${epoch}; this worker was adopted under epoch ${fencing.epoch}`);
}

const ROUTES: Route[] = [
  {
    method: 'GET', pattern: /^\/w1\/hello$/, operationId: 'WorkerHello',
    run: async ({ host, version, startedAt, identity, fencing }): Promise<Wire['WorkerHello']> => ({
      protocol_version: WORKER_PROTOCOL_VERSION, worker_version: version, started_at: startedAt, accelerator: host.accelerator, epoch: fencing.epoch, adoption: fencing.state,
      tls_fingerprint: identity.tlsFingerprint,
      offer: { vcpu: identity.offer.vcpu, memory_mib: identity.offer.memoryMib, disk_mib: identity.offer.diskMib },
    }),
  },
  {
    method: 'GET', pattern: /^\/w1\/counters$/, operationId: 'WorkerCounters',
    run: async ({ startedAt, counts }): Promise<Wire['WorkerCounters']> => ({ started_at: startedAt, guest_links_dropped: { agent: counts.agentLinksDropped } }),
  },
  {
    method: 'GET', pattern: /^\/w1\/checks$/, operationId: 'WorkerChecks',
    run: async ({ host }): Promise<Wire['WorkerChecks']> => {
      const [problem, capacity] = await Promise.all([host.isolationProblem(), host.capacity()]);
      return {
        accelerator: host.accelerator,
        isolation_problem: problem ? { reason: problem.reason.slice(0, 2000), hint: problem.hint.slice(0, 2000) } : null,
        capacity: { free_memory_mib: capacity.freeMemoryMib },
      };
    },
  },
  {
    method: 'GET', pattern: /^\/w1\/images\/([a-z-]{1,20})$/, operationId: 'GetImageState',
    run: async ({ host }, match): Promise<Wire['ImageState']> => {
      const profile = PROFILES.find((p) => p === match[1]);
      if (!profile) throw new Refusal(404, `no image profile ${match[1]}`);
      const current = host.currentImage(profile);
      const build = host.imageBuildState(profile);
      return { current: current ? wire.image(current) : null, build: { state: build.state, step: build.step?.slice(0, 2000) ?? null, error: build.error?.slice(0, 2000) ?? null } };
    },
  },
  {
    method: 'POST', pattern: /^\/w1\/images\/([a-z-]{1,20})\/collect$/, operationId: 'CollectImages',
    run: async ({ images }, match, body): Promise<Wire['ImageVersions']> => {
      if (!PROFILES.some((p) => p === match[1])) throw new Refusal(404, `no image profile ${match[1]}`);
      return { versions: await images.removeUnused(new Set((body as Wire['ImageVersions']).versions)) };
    },
  },
  {
    method: 'GET', pattern: new RegExp(`^/w1/image-versions/${VERSION}/manifest$`), operationId: 'GetImageManifest',
    run: async ({ host }, [, version]) => {
      // Versions are found by name alone; the profile and key are not read.
      const manifest = await host.imageManifest({ profile: 'minimal', version: version!, artifactKey: '' });
      return { manifest: manifest?.version === version ? wire.manifest(manifest) : null };
    },
  },
  { method: 'GET', pattern: /^\/w1\/machines$/, operationId: 'ListMachines', run: async ({ host }) => ({ ids: await host.knownMachineIds() }) },
  {
    method: 'PUT', pattern: /^\/w1\/epoch$/, operationId: 'FenceWorker',
    run: async ({ fencing }, _m, body): Promise<Wire['Epoch']> => {
      const { epoch } = body as Wire['Epoch'];
      if (!fencing.fence(epoch)) throw new Refusal(409, `epoch ${epoch} is not higher than this worker's ${fencing.epoch}`);
      return { epoch };
    },
  },
  {
    method: 'POST', pattern: /^\/w1\/strays$/, operationId: 'RemoveStrays',
    // Asked as it goes: a machine a command changes while the removal runs is kept too, and
    // everything once a newer adoption has begun (its own list decides).
    run: async ({ host, fencing, epoch }, _m, body) => {
      fencing.removal(epoch, 'removing');
      let partial = false;
      const keeps = (id: string) => {
        if (!fencing.keeps(id, epoch)) return false;
        partial ||= fencing.keptForWorkOnly(id, epoch);
        return true;
      };
      try {
        const ids = await host.removeStrays((body as Wire['MachineIds']).ids, keeps);
        fencing.removal(epoch, partial ? 'partial' : 'done');
        return { ids };
      } catch (error) {
        fencing.removal(epoch, 'failed');
        throw error;
      }
    },
  },
  { method: 'POST', pattern: /^\/w1\/layers\/collect$/, operationId: 'CollectLayers', run: async ({ host }) => (await host.removeUnusedLayers(), done) },
  {
    method: 'GET', pattern: new RegExp(`^/w1/machines/${ID}$`), operationId: 'GetMachine',
    run: async ({ host }, [, id]) => ({ running: await host.isRunning(id!), session_saved: await host.hasSession(id!) }),
  },
  { method: 'DELETE', pattern: new RegExp(`^/w1/machines/${ID}$`), operationId: 'DestroyMachine', run: async ({ host, fencing }, [, id]) => (await host.destroy(id!), fencing.forget(id!), done) },
  {
    method: 'POST', pattern: new RegExp(`^/w1/machines/${ID}/create$`), operationId: 'CreateMachine',
    run: async ({ host }, [, id], body) => {
      const request = body as Wire['StartRequest'];
      return wire.started(await host.create(id!, fromWire.image(request.image), fromWire.shape(request.shape), fromWire.identity(request.identity)));
    },
  },
  {
    method: 'POST', pattern: new RegExp(`^/w1/machines/${ID}/fork$`), operationId: 'ForkMachine',
    run: async ({ host }, [, id], body) => {
      const request = body as Wire['ForkRequest'];
      const forked = await host.fork(request.source_id, id!, fromWire.image(request.image), fromWire.shape(request.shape), fromWire.identity(request.identity), { memory: request.memory });
      return wire.started(forked);
    },
  },
  {
    method: 'POST', pattern: new RegExp(`^/w1/machines/${ID}/snapshots/${SNAPSHOT_ID}$`), operationId: 'TakeSnapshot',
    run: async ({ host }, [, id, snapshotId], body) => {
      const request = body as Wire['TakeSnapshotRequest'];
      const taken = await host.takeSnapshot(id!, snapshotId!, fromWire.shape(request.shape), { memory: request.memory });
      return { memory: taken.memory, size_bytes: taken.sizeBytes, paused_ms: Math.round(taken.pausedMs) } satisfies Wire['TakenSnapshot'];
    },
  },
  {
    method: 'POST', pattern: new RegExp(`^/w1/machines/${ID}/from-snapshot$`), operationId: 'CreateMachineFromSnapshot',
    run: async ({ host }, [, id], body) => {
      const request = body as Wire['FromSnapshotRequest'];
      const images = { memory: fromWire.image(request.memory_image), boot: fromWire.image(request.boot_image) };
      return wire.started(await host.createFromSnapshot(id!, request.snapshot_id, images, fromWire.shape(request.shape), fromWire.identity(request.identity), { memory: request.memory }));
    },
  },
  {
    method: 'DELETE', pattern: new RegExp(`^/w1/snapshots/${SNAPSHOT_ID}$`), operationId: 'DeleteSnapshot',
    run: async ({ host }, [, snapshotId]) => (await host.deleteSnapshot({ id: snapshotId!, workerId: null }), done),
  },
  ...(['boot', 'resume'] as const).map((how): Route => ({
    method: 'POST', pattern: new RegExp(`^/w1/machines/${ID}/${how}$`), operationId: how === 'boot' ? 'BootMachine' : 'ResumeMachine',
    run: async ({ host }, [, id], body) => {
      const request = body as Wire['StartRequest'];
      return wire.started(await host[how](id!, fromWire.shape(request.shape), fromWire.image(request.image), fromWire.identity(request.identity)));
    },
  })),
  {
    method: 'POST', pattern: new RegExp(`^/w1/machines/${ID}/stop$`), operationId: 'StopMachine',
    run: async ({ host }, [, id], body) => ({ session_saved: (await host.stop(id!, { saveSession: (body as { save_session: boolean }).save_session })).sessionSaved }),
  },
  { method: 'POST', pattern: new RegExp(`^/w1/machines/${ID}/adopt$`), operationId: 'AdoptMachine', run: async ({ host }, [, id]) => ({ alive: await host.adopt(id!) }) },
  {
    method: 'PUT', pattern: new RegExp(`^/w1/machines/${ID}/identity$`), operationId: 'RefreshIdentity',
    run: async ({ host }, [, id], body) => (await host.refreshIdentity(id!, fromWire.identity(body as Wire['GuestIdentity'])), done),
  },
  { method: 'DELETE', pattern: new RegExp(`^/w1/machines/${ID}/session$`), operationId: 'DiscardSession', run: async ({ host }, [, id]) => (await host.discardSession(id!), done) },
  { method: 'POST', pattern: new RegExp(`^/w1/machines/${ID}/checkpoint$`), operationId: 'CheckpointMachine', run: async ({ host }, [, id]) => ({ taken: (await host.checkpoint(id!)).taken }) },
  {
    method: 'GET', pattern: new RegExp(`^/w1/machines/${ID}/console$`), operationId: 'ConsoleTail',
    run: async ({ host }, [, id], _body, query) => {
      const lines = Number(query.get('lines'));
      if (!Number.isInteger(lines) || lines < 1 || lines > 10_000) throw new Refusal(400, 'lines must be an integer from 1 to 10000');
      // The spec's bound: its JSON (at most 6 bytes a character, escaped) stays under the client's 1 MiB.
      return { text: (await host.consoleTail(id!, lines)).slice(-100_000) };
    },
  },
  {
    method: 'GET', pattern: new RegExp(`^/w1/machines/${ID}/screen$`), operationId: 'GetMachineScreen',
    run: async ({ host }, [, id]): Promise<Wire['MachineScreen']> => {
      const display = await host.imageDisplay(id!);
      return { display: display ? { width: display.width, height: display.height } : null };
    },
  },
  {
    method: 'POST', pattern: new RegExp(`^/w1/machines/${ID}/agent/metrics$`), operationId: 'AgentMetrics',
    run: async ({ host }, [, id], body) => (await runningAgent(host, id!)).metrics((body as Wire['MetricsRequest']).sample_ms),
  },
  {
    method: 'POST', pattern: new RegExp(`^/w1/machines/${ID}/agent/execs$`), operationId: 'StartExec',
    run: async ({ host, execs }, [, id], body) => {
      const request = body as Wire['ExecStart'];
      const agent = await runningAgent(host, id!);
      return execs.start(id!, () => agent.exec(fromWire.execStart(request), request.request_timeout_ms ? { timeoutMs: request.request_timeout_ms } : undefined));
    },
  },
  {
    method: 'POST', pattern: new RegExp(`^/w1/execs/${EXEC}/signal$`), operationId: 'SignalExec',
    run: async ({ execs }, [, exec], body) => ({ delivered: await openExec(execs, exec!).signal((body as { signal: NodeJS.Signals | number }).signal) }),
  },
  {
    method: 'POST', pattern: new RegExp(`^/w1/execs/${EXEC}/cancel$`), operationId: 'CancelExec',
    run: async ({ execs }, [, exec], body) => ({ accepted: await openExec(execs, exec!).cancel((body as { grace_ms?: number }).grace_ms) }),
  },
];

/** A running machine's agent; a machine that is not running fails as a lost agent link would (retryable). */
export async function runningAgent(host: WorkerHost, id: string) {
  if (!(await host.isRunning(id))) throw new AgentCallError('disconnected', `machine ${id} is not running`);
  return host.agent(id);
}

function openExec(execs: ExecTable, id: string) {
  const stream = execs.find(id);
  if (!stream) throw new Refusal(404, `no open command ${id}`);
  return stream;
}

/** Finds the route, checks the body, runs it. */
export async function routeRequest(context: RouteContext, method: string, target: string, rawBody: Buffer): Promise<Answer> {
  const url = new URL(target, 'http://worker');
  // What was signed is what is routed: a target the URL parser would rewrite (dot segments, encoded
  // characters, a second slash) is refused, never resolved into another machine's path.
  // Dots are allowed (image versions) only inside segments: a `.` or `..` segment fails the first test.
  if (url.pathname + url.search !== target || !/^\/w1(\/[A-Za-z0-9._-]+)+(\?lines=\d{1,5})?$/.test(target)) {
    return failure(400, 'bad_request', 'the request target is not in its canonical form');
  }
  for (const route of ROUTES) {
    if (route.method !== method) continue;
    const match = route.pattern.exec(url.pathname);
    if (!match) continue;
    if (!UNFENCED.has(route.operationId) && !context.fencing.admits(context.epoch)) return staleEpoch(context.fencing, context.epoch);
    let body: unknown = undefined;
    const validate = validators[`${route.operationId}__body`];
    if (validate) {
      try {
        body = JSON.parse(rawBody.toString('utf8'));
      } catch {
        return failure(400, 'bad_request', 'the body is not JSON');
      }
      if (!validate(body)) return failure(400, 'bad_request', `the body does not fit ${route.operationId}: ${validate.errors?.[0]?.instancePath ?? ''} ${validate.errors?.[0]?.message ?? ''}`.trim());
    }
    // A machine a command works on is kept from a removal of strays while it runs, and one it
    // changes (anything but a read) for a while after (worker-fencing.ts).
    const machine = url.pathname.startsWith('/w1/machines/') ? match[1] : undefined;
    const ended = machine ? context.fencing.begin(machine) : () => undefined;
    if (machine && method !== 'GET') context.fencing.address(machine);
    try {
      return { status: 200, body: await route.run(context, match, body, url.searchParams) };
    } catch (error) {
      return failureOf(error);
    } finally {
      ended();
    }
  }
  return failure(404, 'not_found', `no ${method} ${url.pathname.slice(0, 200)} in protocol ${WORKER_PROTOCOL_VERSION}`);
}

export function failure(status: number, code: Wire['WorkerError']['error']['code'], message: string, agentCode?: Wire['AgentErrorCode']): Answer {
  const body: Wire['WorkerError'] = { error: { code, message: message.slice(0, 2000), ...(agentCode ? { agent_code: agentCode } : {}) } };
  return { status, body };
}

const REFUSAL_CODES = { 400: 'bad_request', 404: 'not_found', 409: 'stale_epoch' } as const;

/** A route's error as the protocol answers it: a refusal, a failed agent call (with its code), or a failed operation. */
export function failureOf(error: unknown): Answer {
  if (error instanceof Refusal) return failure(error.status, REFUSAL_CODES[error.status], error.message);
  if (error instanceof AgentCallError) return failure(500, 'failed', error.message, error.code);
  return failure(500, 'failed', error instanceof Error ? error.message : String(error));
}

/** An upgrade's route (AttachExec, OpenTcp, OpenScreen, OpenScreenVideo, BuildLayer, ExportMachine, ImportMachine): what it names, or the answer that refuses it. */
export type UpgradeTarget = { kind: 'exec'; exec: string } | { kind: 'tcp'; machine: string; port: number } | { kind: 'screen'; machine: string } | { kind: 'video'; machine: string; request: ScreenVideoRequest } | { kind: 'layer' } | { kind: 'export'; machine: string } | { kind: 'import'; machine: string; limits: MoveLimits };

export function upgradeTarget(target: string): UpgradeTarget | Answer {
  const url = new URL(target, 'http://worker');
  if (url.pathname + url.search !== target) return failure(400, 'bad_request', 'the request target is not in its canonical form');
  const exec = new RegExp(`^/w1/execs/${EXEC}/stream$`).exec(target);
  if (exec) return { kind: 'exec', exec: exec[1]! };
  const tcp = new RegExp(`^/w1/machines/${ID}/agent/tcp/([1-9][0-9]{0,4})$`).exec(target);
  if (tcp && Number(tcp[2]) <= 65535) return { kind: 'tcp', machine: tcp[1]!, port: Number(tcp[2]) };
  const screen = new RegExp(`^/w1/machines/${ID}/screen/rfb$`).exec(target);
  if (screen) return { kind: 'screen', machine: screen[1]! };
  const video = new RegExp(`^/w1/machines/${ID}/screen/video\\?account=([A-Za-z0-9_-]{1,64})&fps=([1-9][0-9]?)&kbps=([1-9][0-9]{2,4})$`).exec(target);
  if (video) {
    const request = { accountId: video[2]!, fps: Number(video[3]), kbps: Number(video[4]) };
    const { fps, kbps } = SCREEN_VIDEO_LIMITS;
    if (request.fps >= fps.min && request.fps <= fps.max && request.kbps >= kbps.min && request.kbps <= kbps.max) return { kind: 'video', machine: video[1]!, request };
  }
  const exported = new RegExp(`^/w1/machines/${ID}/export$`).exec(target);
  if (exported) return { kind: 'export', machine: exported[1]! };
  const imported = new RegExp(`^/w1/machines/${ID}/import\\?disk_mib=([1-9][0-9]{0,9})&memory_mib=([1-9][0-9]{0,9})$`).exec(target);
  if (imported && Number(imported[2]) < 2 ** 31 && Number(imported[3]) < 2 ** 31) return { kind: 'import', machine: imported[1]!, limits: { diskMib: Number(imported[2]), memoryMib: Number(imported[3]) } };
  if (target === '/w1/layers/build') return { kind: 'layer' };
  return failure(404, 'not_found', `no WebSocket at ${url.pathname.slice(0, 200)} in protocol ${WORKER_PROTOCOL_VERSION}`);
}
