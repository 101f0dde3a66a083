// Named snapshot commands (docs/snapshots.md): `snapshot` keeps a machine's disk (and memory) and
// waits while it is taken, `snapshots` lists the account's, `delete-snapshot` removes one; `kiste
// create --snapshot SNAP` makes a machine from one (cli/machines.ts). Refusals are shown as every
// command shows them (message with the code, hint, request id).
import type { components } from '../src/generated/api';
import { allPages, apiFor, CliError, ok, requireToken } from './api';
import type { CliContext } from './context';
import { table } from './machines';
import { withSpinner } from './progress';

type Snapshot = components['schemas']['SnapshotResponse'];
type Output = { json: unknown; text: string };

const PAGE = 100;
const POLL_MS = 1000;

export async function takeSnapshot(ctx: CliContext, machine: string, name: string, options: { diskOnly?: boolean; wait?: boolean }): Promise<Output> {
  requireToken(ctx);
  const api = apiFor(ctx);
  const body = { name, ...(options.diskOnly ? { memory: false } : {}) };
  const taken = ok(await api.POST('/v1/instances/{name}/snapshots', { params: { path: { name: machine } }, body }));
  if (options.wait === false) return { json: taken, text: describeSnapshot(taken) };
  const done = await withSpinner(`taking snapshot ${name} of ${machine}`, !ctx.json, async (relabel) => {
    for (let current = taken; ; ) {
      if (current.status === 'ready') return current;
      if (current.status === 'failed') throw new CliError(`snapshot ${name} failed: ${current.error ?? 'unknown error'}`, { hint: `Delete it with \`kiste delete-snapshot ${name}\` and take it again.` });
      if (current.progress !== null) relabel(`taking snapshot ${name} of ${machine}: ${Math.round(current.progress * 100)} %`);
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      current = ok(await api.GET('/v1/snapshots/{id}', { params: { path: { id: taken.id } } }));
    }
  });
  return { json: done, text: describeSnapshot(done) };
}

/** The account's snapshots (of one machine with `machine`), every page. */
export async function listSnapshots(ctx: CliContext, machine?: string): Promise<Output> {
  requireToken(ctx);
  const all = await allPages((after) => apiFor(ctx).GET('/v1/snapshots', { params: { query: { limit: PAGE, starting_after: after, ...(machine ? { instance: machine } : {}) } } }));
  const rows = all.map((s) => [s.name, s.instance_name, s.status, s.memory ? 'disk+memory' : 'disk', s.size_mib === null ? '-' : `${s.size_mib} MiB`, s.created_at]);
  return { json: all, text: table(['NAME', 'MACHINE', 'STATUS', 'HOLDS', 'SIZE', 'CREATED'], rows) };
}

export async function deleteSnapshot(ctx: CliContext, snapshot: string): Promise<Output> {
  requireToken(ctx);
  const deleted = ok(await apiFor(ctx).DELETE('/v1/snapshots/{id}', { params: { path: { id: snapshot } } }));
  return { json: deleted, text: `snapshot ${snapshot} deleted` };
}

export function describeSnapshot(s: Snapshot): string {
  const fields: [string, string][] = [
    ['name', s.name], ['id', s.id], ['machine', s.instance_name], ['status', s.status], ['holds', s.memory ? 'disk and memory' : 'disk'],
    ['size', s.size_mib === null ? '-' : `${s.size_mib} MiB`], ['shape', `${s.source.vcpu} vCPU, ${s.source.memory_mib} MiB, ${s.source.disk_mib} MiB disk`],
  ];
  if (s.error) fields.push(['error', s.error]);
  return fields.map(([k, v]) => `${k.padEnd(9)}${v}`).join('\n');
}
