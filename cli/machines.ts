// Machine commands: list, get, create, stop, resume, restart, upgrade, rename, extend, fork, delete,
// logs, metrics. A lifecycle call the service finishes in the background (202) is followed until the
// machine settles, with a spinner on a terminal. Create waits while the service's machine image is
// still being built (503 K06), showing the build step. With --image, the sizes not given are the
// image's recommended ones (when it has some).
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { components } from '../src/generated/api';
import { apiFor, CliError, errorCode, errorFromEnvelope, ok, requireToken, retryAfterMs } from './api';
import type { CliContext } from './context';
import { type Relabel, withSpinner } from './progress';
import { pollUntil, sleep } from '../src/compute/qemu/wait';

type Instance = components['schemas']['InstanceResponse'];
type CreateBody = components['schemas']['CreateInstanceRequest'];
const SETTLED = new Set(['running', 'stopped', 'error']);
const POLL_MS = 1000;
/** How long create waits for the service's machine image (built at its first start and after upgrades). */
const IMAGE_WAIT_MS = 30 * 60_000;
/** Between two creates while the image is built, when the answer names no Retry-After (the spec's 30 s). */
const IMAGE_RETRY_MS = 30_000;

export async function listMachines(ctx: CliContext): Promise<{ json: unknown; text: string }> {
  requireToken(ctx);
  const list = ok(await apiFor(ctx).GET('/v1/instances'));
  const rows = list.data.map((i) => [i.name, i.status, String(i.vcpu), `${i.memory_mib} MiB`, `${i.disk_mib} MiB`, i.expires_at ?? '-', i.created_at]);
  return { json: list, text: table(['NAME', 'STATUS', 'VCPU', 'MEMORY', 'DISK', 'EXPIRES', 'CREATED'], rows) };
}

export async function getMachine(ctx: CliContext, name: string): Promise<{ json: unknown; text: string }> {
  requireToken(ctx);
  const instance = ok(await apiFor(ctx).GET('/v1/instances/{name}', { params: { path: { name } } }));
  return { json: instance, text: describe(instance) };
}

export interface CreateOptions {
  /** Not given: the image's recommended resources (a private image made with some), else the defaults. */
  vcpu?: number;
  memory?: number;
  disk?: number;
  sshKey?: string;
  ttl?: number;
  image?: string;
  env?: string;
  /** A named snapshot (ID or name): without --vcpu and --memory its source's, so its memory is continued. */
  snapshot?: string;
}

export const CREATE_DEFAULTS = { vcpu: 2, memory: 2048, disk: 16384 };

export async function createMachine(ctx: CliContext, name: string | undefined, options: CreateOptions): Promise<Instance> {
  requireToken(ctx);
  const keyFile = options.sshKey ?? defaultPublicKey();
  if (!keyFile || !existsSync(keyFile)) {
    throw new CliError('no SSH public key to give the machine', { hint: 'Pass --ssh-key FILE (e.g. ~/.ssh/id_ed25519.pub), or make one with ssh-keygen.' });
  }
  const incomplete = options.vcpu === undefined || options.memory === undefined || options.disk === undefined;
  const recommended = options.snapshot && incomplete
    ? ok(await apiFor(ctx).GET('/v1/snapshots/{id}', { params: { path: { id: options.snapshot } } })).source
    : options.image && incomplete
      ? ok(await apiFor(ctx).GET('/v1/images/{id}', { params: { path: { id: options.image } } })).resources
      : null;
  const body: CreateBody = {
    profile: 'desktop',
    vcpu: options.vcpu ?? (recommended?.vcpu || CREATE_DEFAULTS.vcpu),
    memory_mib: options.memory ?? (recommended?.memory_mib || CREATE_DEFAULTS.memory),
    disk_mib: options.disk ?? (recommended?.disk_mib || CREATE_DEFAULTS.disk),
    ssh_public_key: readFileSync(keyFile, 'utf8').trim(), ...(name ? { name } : {}), ...(options.ttl ? { ttl_seconds: options.ttl } : {}),
    ...(options.image ? { image: options.image } : {}), ...(options.env ? { environment: options.env } : {}),
    ...(options.snapshot ? { snapshot: options.snapshot } : {}),
  };
  const booting = `creating ${name ?? 'a machine'}: booting until SSH and commands are accepted`;
  return withSpinner(booting, !ctx.json, (relabel) => createOnceImageReady(ctx, body, booting, relabel));
}

/**
 * POST /v1/instances, asked again while the service answers 503 K06 (its machine image is still
 * being built; a K06 created nothing, so asking again is safe): after each Retry-After, for at most
 * IMAGE_WAIT_MS, with the service's message, which names the build step, in the spinner.
 */
async function createOnceImageReady(ctx: CliContext, body: CreateBody, booting: string, relabel: Relabel): Promise<Instance> {
  const deadline = Date.now() + IMAGE_WAIT_MS;
  for (;;) {
    const answer = await apiFor(ctx).POST('/v1/instances', { body });
    if (errorCode(answer) !== 'K06') return ok(answer);
    const notReady = errorFromEnvelope(answer.error, answer.response);
    const waitMs = Math.min(Math.max(1000, retryAfterMs(answer.response, IMAGE_RETRY_MS)), deadline - Date.now());
    if (waitMs <= 0) {
      throw new CliError(`the service's machine image was not ready after ${IMAGE_WAIT_MS / 60_000} minutes: ${notReady.message}`, notReady.details);
    }
    relabel(`${notReady.message.replace(/\s*\(code: K06\)$/, '')} Waiting for it…`);
    await sleep(waitMs);
    relabel(booting);
  }
}

type Lifecycle = 'stop' | 'resume' | 'restart' | 'upgrade';

export async function lifecycle(ctx: CliContext, name: string, action: Lifecycle, options: { snapshot?: boolean } = {}): Promise<Instance> {
  requireToken(ctx);
  const api = apiFor(ctx);
  const path = { params: { path: { name } } };
  return withSpinner(`${action} ${name}`, !ctx.json, async () => {
    const answer =
      action === 'stop' ? await api.POST('/v1/instances/{name}/stop', { ...path, body: options.snapshot ? { snapshot: true } : {} })
      : action === 'resume' ? await api.POST('/v1/instances/{name}/resume', path)
      : action === 'restart' ? await api.POST('/v1/instances/{name}/restart', path)
      : await api.POST('/v1/instances/{name}/upgrade', path);
    const instance = ok(answer) as Instance;
    return answer.response.status === 202 ? settle(ctx, name) : instance;
  });
}

export async function renameMachine(ctx: CliContext, name: string, newName: string): Promise<Instance> {
  requireToken(ctx);
  return ok(await apiFor(ctx).POST('/v1/instances/{name}/rename', { params: { path: { name } }, body: { name: newName } })) as Instance;
}

export async function extendMachine(ctx: CliContext, name: string, seconds: number): Promise<Instance> {
  requireToken(ctx);
  return ok(await apiFor(ctx).POST('/v1/instances/{name}/extend', { params: { path: { name } }, body: { ttl_seconds: seconds } })) as Instance;
}

export async function forkMachine(ctx: CliContext, name: string, copy: string, options: { memory: boolean }): Promise<Instance> {
  requireToken(ctx);
  return withSpinner(`forking ${name} into ${copy}${options.memory ? ' with its memory' : ''}`, !ctx.json, async () =>
    ok(await apiFor(ctx).POST('/v1/instances/{name}/fork', { params: { path: { name } }, body: { name: copy, memory: options.memory } })) as Instance,
  );
}

export async function deleteMachine(ctx: CliContext, name: string): Promise<void> {
  requireToken(ctx);
  await withSpinner(`deleting ${name}`, !ctx.json, async () => {
    ok(await apiFor(ctx).DELETE('/v1/instances/{name}', { params: { path: { name } } }));
    // Deletion may finish in the background: done once the name is gone.
    await pollForever(async () => ((await apiFor(ctx).GET('/v1/instances/{name}', { params: { path: { name } } })).response.status === 404 ? true : undefined));
  });
}

export async function machineLogs(ctx: CliContext, name: string, tail: number): Promise<string> {
  requireToken(ctx);
  return ok(await apiFor(ctx).GET('/v1/instances/{name}/logs', { params: { path: { name }, query: { tail } } })).logs;
}

export async function machineMetrics(ctx: CliContext, name: string): Promise<{ json: unknown; text: string }> {
  requireToken(ctx);
  const m = ok(await apiFor(ctx).GET('/v1/instances/{name}/metrics', { params: { path: { name } } }));
  const lines = [
    `cpu     ${m.cpu.percent === null ? '-' : `${m.cpu.percent.toFixed(1)} %`} of ${m.cpu.cores} cores (load ${m.cpu.load_1.toFixed(2)})`,
    `memory  ${m.memory.used_mib} of ${m.memory.total_mib} MiB`,
    `disk    ${m.disk.used_mib} of ${m.disk.total_mib} MiB`,
    `uptime  ${m.uptime_seconds} s`,
  ];
  return { json: m, text: lines.join('\n') };
}

/** Follows a 202 answer: the machine is settled once its status is running, stopped or error. */
function settle(ctx: CliContext, name: string): Promise<Instance> {
  return pollForever(async () => {
    const instance = ok(await apiFor(ctx).GET('/v1/instances/{name}', { params: { path: { name } } }));
    return SETTLED.has(instance.status) ? instance : undefined;
  });
}

/** Asks again every POLL_MS, as long as it takes (the user can interrupt), until `probe` answers something. */
async function pollForever<T>(probe: () => Promise<T | undefined>): Promise<T> {
  return (await pollUntil(probe, Number.POSITIVE_INFINITY, POLL_MS)) as T;
}

export function describe(i: Instance): string {
  const fields: [string, unknown][] = [
    ['name', i.name], ['status', i.status], ['id', i.id], ['vcpu', i.vcpu], ['memory', `${i.memory_mib} MiB`], ['disk', `${i.disk_mib} MiB`],
    ['image', `${i.image}${i.image_version ? ` (${i.image_version})` : ''}`], ['expires', i.expires_at ?? '-'], ['created', i.created_at],
  ];
  if (i.setup_status !== 'none') fields.push(['setup', `${i.setup_status}${i.setup_error ? `: ${i.setup_error}` : ''}`]);
  return fields.map(([k, v]) => `${k.padEnd(8)}${String(v)}`).join('\n');
}

export function table(head: string[], rows: string[][]): string {
  const widths = head.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] ?? '').length)));
  return [head, ...rows].map((r) => r.map((cell, c) => (c === r.length - 1 ? cell : cell.padEnd(widths[c]!))).join('  ')).join('\n');
}

function defaultPublicKey(): string | undefined {
  return ['id_ed25519.pub', 'id_ecdsa.pub', 'id_rsa.pub'].map((f) => join(homedir(), '.ssh', f)).find((f) => existsSync(f));
}
