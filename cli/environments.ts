// Environment commands (list, show, versions, create, update) and a machine's environment setup.
// An environment version holds repositories to clone, variables, secret files and a setup script;
// every create or update publishes a new immutable version. The flags are read in order: --path and
// --credentials belong to the --repo before them. Secret file contents are read from local files
// and sent base64-encoded; nothing the CLI prints ever holds them (the service never returns them).
import { readFileSync } from 'node:fs';
import type { components } from '../src/generated/api';
import { sleep } from '../src/compute/qemu/wait';
import { allPages, apiFor, CliError, ok, requireToken } from './api';
import type { CliContext } from './context';
import { table } from './machines';
import { withSpinner } from './progress';

type Schemas = components['schemas'];
type Repository = Schemas['RepositorySpec'];
type Version = Schemas['EnvironmentVersionResponse'];
type Setup = Schemas['InstanceSetupResponse'];
type Output = { json: unknown; text: string };

const PAGE = 100;
const POLL_MS = 1000;

/** The fields `--clear` empties (update only): the names the flags use. */
export const CLEARABLE = ['repos', 'vars', 'secret-files', 'setup-script'] as const;
type Clearable = (typeof CLEARABLE)[number];

/**
 * The environment flags of one command line, collected in order by commander's option parsers
 * (`--path` and `--credentials` change the `--repo` given last). A kind of flag not given leaves
 * its field out of the request: create leaves it empty, update keeps the current version's.
 */
export class EnvironmentFlags {
  repositories?: Repository[];
  variables?: Record<string, string>;
  /** guest path → local file; read only when the request is made. */
  secretFiles?: Map<string, string>;
  setupScript?: string;
  readonly clear = new Set<Clearable>();

  /** `URL[#REF]`: a ref holds no '#', so the last one splits. */
  repo(value: string): void {
    const hash = value.lastIndexOf('#');
    const url = hash < 0 ? value : value.slice(0, hash);
    const ref = hash < 0 ? null : value.slice(hash + 1);
    if (!url || ref === '') throw new CliError(`--repo ${value}: expected URL or URL#REF`);
    (this.repositories ??= []).push({ url, ref, path: null, credentials_file: null });
  }

  path(value: string): void {
    this.last('--path').path = value;
  }

  credentials(value: string): void {
    this.last('--credentials').credentials_file = value;
  }

  variable(value: string): void {
    const eq = value.indexOf('=');
    if (eq <= 0) throw new CliError(`--var ${value}: expected NAME=VALUE`);
    (this.variables ??= {})[value.slice(0, eq)] = value.slice(eq + 1);
  }

  /** `GUEST_PATH=LOCAL_FILE`, split at the first '=' (guest paths start with '/'). */
  secretFile(value: string): void {
    const eq = value.indexOf('=');
    if (eq <= 0 || eq === value.length - 1) throw new CliError(`--secret-file ${value}: expected GUEST_PATH=LOCAL_FILE`);
    const guest = value.slice(0, eq);
    this.secretFiles ??= new Map();
    if (this.secretFiles.has(guest)) throw new CliError(`--secret-file ${guest} is given twice`);
    this.secretFiles.set(guest, value.slice(eq + 1));
  }

  setupScriptFile(value: string): void {
    this.setupScript = value;
  }

  clearField(value: string): void {
    if (!(CLEARABLE as readonly string[]).includes(value)) throw new CliError(`--clear ${value}: expected one of ${CLEARABLE.join(', ')}`);
    this.clear.add(value as Clearable);
  }

  /** The request's fields: only the kinds given (or cleared); secret files and the script read now. */
  body(): Schemas['UpdateEnvironmentRequest'] {
    const given: Record<Clearable, boolean> = {
      repos: this.repositories !== undefined, vars: this.variables !== undefined,
      'secret-files': this.secretFiles !== undefined, 'setup-script': this.setupScript !== undefined,
    };
    for (const field of this.clear) if (given[field]) throw new CliError(`--clear ${field} and a value for it were both given`);
    const body: Schemas['UpdateEnvironmentRequest'] = {};
    if (this.repositories || this.clear.has('repos')) body.repositories = this.repositories ?? [];
    if (this.variables || this.clear.has('vars')) body.variables = this.variables ?? {};
    if (this.secretFiles || this.clear.has('secret-files')) {
      body.secret_files = [...(this.secretFiles ?? [])].map(([path, local]) => ({ path, content_base64: readLocal(local, `the secret file ${path}`).toString('base64') }));
    }
    if (this.setupScript !== undefined || this.clear.has('setup-script')) {
      body.setup_script = this.setupScript === undefined ? '' : readLocal(this.setupScript === '-' ? 0 : this.setupScript, 'the setup script').toString('utf8');
    }
    return body;
  }

  private last(flag: string): Repository {
    const repo = this.repositories?.[this.repositories.length - 1];
    if (!repo) throw new CliError(`${flag} belongs to a --repo: give it after the --repo it is for`);
    return repo;
  }
}

export async function listEnvironments(ctx: CliContext): Promise<Output> {
  requireToken(ctx);
  const all = await allPages((after) => apiFor(ctx).GET('/v1/environments', { params: { query: { limit: PAGE, starting_after: after } } }));
  return { json: all, text: table(['NAME', 'VERSION', 'UPDATED', 'CREATED'], all.map((e) => [e.name, String(e.current_version), e.updated_at, e.created_at])) };
}

export async function showEnvironment(ctx: CliContext, name: string): Promise<Output> {
  requireToken(ctx);
  const environment = ok(await apiFor(ctx).GET('/v1/environments/{name}', { params: { path: { name } } }));
  return { json: environment, text: describeVersion(environment.current, environment.updated_at) };
}

export async function environmentVersions(ctx: CliContext, name: string, limit: number): Promise<Output> {
  requireToken(ctx);
  const list = ok(await apiFor(ctx).GET('/v1/environments/{name}/versions', { params: { path: { name }, query: { limit } } }));
  const rows = list.data.map((v) => [
    String(v.version), v.created_at, String(v.repositories.length), String(Object.keys(v.variables).length), String(v.secret_paths.length),
    v.setup_script ? `${lineCount(v.setup_script)}` : '-', v.id,
  ]);
  return { json: list, text: table(['VERSION', 'CREATED', 'REPOS', 'VARS', 'SECRET FILES', 'SETUP SCRIPT', 'ID'], rows) };
}

export async function createEnvironment(ctx: CliContext, name: string, flags: EnvironmentFlags): Promise<Output> {
  requireToken(ctx);
  const body = { name, ...flags.body() };
  const created = ok(await apiFor(ctx).POST('/v1/environments', { body }));
  return { json: created, text: `${created.name}: version ${created.current_version}` };
}

export async function updateEnvironment(ctx: CliContext, name: string, flags: EnvironmentFlags): Promise<Output> {
  requireToken(ctx);
  const body = flags.body();
  if (Object.keys(body).length === 0) {
    throw new CliError('nothing to change', { hint: 'Give --repo, --var, --secret-file or --setup-script (each kind replaces that field whole), or --clear FIELD.' });
  }
  const updated = ok(await apiFor(ctx).PUT('/v1/environments/{name}', { params: { path: { name } }, body }));
  return { json: updated, text: `${updated.name}: version ${updated.current_version}` };
}

/** GET /v1/instances/{name}/setup; with wait, asked again while the setup is pending or running. */
export async function instanceSetup(ctx: CliContext, name: string, options: { wait: boolean }): Promise<{ json: unknown; text: string; failed: boolean }> {
  requireToken(ctx);
  const read = async () => ok(await apiFor(ctx).GET('/v1/instances/{name}/setup', { params: { path: { name } } }));
  const setup = await withSpinner(`environment setup of ${name}`, options.wait && !ctx.json, async (relabel) => {
    let current = await read();
    while (options.wait && (current.status === 'pending' || current.status === 'running')) {
      const step = current.steps.find((s) => s.status === 'running');
      relabel(`environment setup of ${name}: ${step ? step.name : current.status}`);
      await sleep(POLL_MS);
      current = await read();
    }
    return current;
  });
  return { json: setup, text: describeSetup(setup), failed: setup.status === 'failed' };
}

function describeVersion(v: Version, updatedAt: string): string {
  const lines = [`name     ${v.environment_name}`, `version  ${v.version}`, `updated  ${updatedAt}`, '', 'repositories'];
  lines.push(...(v.repositories.length ? v.repositories.map((r) => `  ${describeRepository(r)}`) : ['  -']));
  lines.push('variables');
  const variables = Object.entries(v.variables).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  lines.push(...(variables.length ? variables.map(([k, value]) => `  ${k}=${value}`) : ['  -']));
  lines.push('secret files (contents are never shown)');
  lines.push(...(v.secret_paths.length ? v.secret_paths.map((p) => `  ${p}`) : ['  -']));
  lines.push(`setup script${v.setup_script ? ` (${lineCount(v.setup_script)})` : ''}`);
  lines.push(...(v.setup_script ? v.setup_script.replace(/\n$/, '').split('\n').map((l) => `  ${l}`) : ['  -']));
  return lines.join('\n');
}

function describeRepository(r: Repository): string {
  return [r.url, r.ref ? `ref ${r.ref}` : null, r.path ? `→ ${r.path}` : null, r.credentials_file ? `credentials ${r.credentials_file}` : null].filter(Boolean).join('  ');
}

function describeSetup(s: Setup): string {
  const head = [`instance     ${s.instance}`, `status       ${s.status}`, `environment  ${s.environment_name ? `${s.environment_name} version ${s.environment_version}` : (s.environment_version_id ?? '-')}`];
  if (s.error) head.push(`error        ${s.error}`);
  if (s.status === 'none') return `${head.join('\n')}\n(this machine was created without an environment)`;
  const steps = table(['STEP', 'STATUS', 'DURATION', 'DETAIL'], s.steps.map((step) => [
    step.name, step.status, step.duration_ms === null ? '-' : `${(step.duration_ms / 1000).toFixed(1)} s`, step.detail ?? '',
  ]));
  const output = s.output ? `\n\noutput${s.output_truncated ? ' (the last 64 KiB)' : ''}:\n${s.output.replace(/\n$/, '')}` : '';
  return `${head.join('\n')}\n\n${steps}${output}`;
}

function readLocal(file: string | 0, what: string): Buffer {
  try {
    return readFileSync(file);
  } catch (error) {
    // The reason only (ENOENT, EACCES…): never anything of the file.
    throw new CliError(`cannot read ${what} from ${file === 0 ? 'stdin' : file}: ${(error as NodeJS.ErrnoException).code ?? 'unreadable'}`);
  }
}

function lineCount(text: string): string {
  const count = text.replace(/\n$/, '').split('\n').length;
  return `${count} line${count === 1 ? '' : 's'}`;
}
