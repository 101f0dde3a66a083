// Hosted service commands (docs/hosted-services.md): `expose` publishes a machine's port at a URL of
// its own, `services` lists a machine's published ports, `unexpose` removes one. The service checks
// names, ports, duplicates and the limit per machine; its refusals are shown as every command shows
// them (message with the code, hint, request id). A machine need not run to have a service: the URL
// answers once it runs and something listens on the port.
import type { components } from '../src/generated/api';
import { allPages, apiFor, ok, requireToken } from './api';
import type { CliContext } from './context';
import { table } from './machines';

type Service = components['schemas']['HostedServiceResponse'];
type Output = { json: unknown; text: string };

const PAGE = 100;

export interface ExposeOptions {
  /** Anyone with the URL (default: only the account). */
  public?: boolean;
  /** The service's name (default: `port-<PORT>`). */
  name?: string;
  description?: string;
}

/** A service's name when none is given: one per port, as ports are unique per machine too. */
export const defaultServiceName = (port: number): string => `port-${port}`;

export async function exposeService(ctx: CliContext, machine: string, port: number, options: ExposeOptions): Promise<Output & { notes: string[] }> {
  requireToken(ctx);
  const body = {
    name: options.name ?? defaultServiceName(port),
    port,
    access: options.public ? ('public' as const) : ('account' as const),
    ...(options.description !== undefined ? { description: options.description } : {}),
  };
  const service = ok(await apiFor(ctx).POST('/v1/instances/{name}/services', { params: { path: { name: machine } }, body }));
  return { json: service, text: describeService(service), notes: serviceNotes(service) };
}

/** The machine's services, every page. */
export async function listServices(ctx: CliContext, machine: string): Promise<Output> {
  requireToken(ctx);
  const all = await allPages((after) => apiFor(ctx).GET('/v1/instances/{name}/services', { params: { path: { name: machine }, query: { limit: PAGE, starting_after: after } } }));
  const rows = all.map((s) => [s.name, String(s.port), s.access, s.status, s.public_url]);
  return { json: all, text: table(['NAME', 'PORT', 'ACCESS', 'STATUS', 'URL'], rows) };
}

export async function unexposeService(ctx: CliContext, machine: string, service: string): Promise<Output> {
  requireToken(ctx);
  const deleted = ok(await apiFor(ctx).DELETE('/v1/instances/{name}/services/{service}', { params: { path: { name: machine, service } } }));
  return { json: deleted, text: `${service} removed from ${machine}` };
}

export function describeService(s: Service): string {
  const fields: [string, string][] = [
    ['url', s.public_url], ['name', s.name], ['port', String(s.port)], ['access', s.access], ['status', s.status],
  ];
  if (s.description) fields.push(['about', s.description]);
  return fields.map(([k, v]) => `${k.padEnd(8)}${v}`).join('\n');
}

/** What the user should know beside the answer (stderr, not with --json): who gets in, and why the URL may not answer yet. */
function serviceNotes(s: Service): string[] {
  const notes: string[] = [];
  if (s.access === 'account') notes.push(`Only your account may use ${s.public_url}; \`kiste expose ${s.instance_name} ${s.port} --public\` (after \`kiste unexpose ${s.instance_name} ${s.name}\`) lets anyone with the URL in.`);
  if (s.status === 'unreachable') notes.push(`Nothing listens on port ${s.port} in ${s.instance_name} yet: start the app there, listening on 0.0.0.0 or localhost.`);
  if (s.status === 'stopped') notes.push(`${s.instance_name} is not running: the URL answers once it runs (\`kiste resume ${s.instance_name}\`).`);
  return notes;
}
