// What an environment may hold. The schema bounds sizes and counts; these rules refuse what would
// reach outside the machine's own files or smuggle options into git (K32, param names the field).
// Repositories and secret files land in a guest that runs other people's code, but the host reads
// none of them: the rules keep a manifest meaning exactly what it says once it is in the guest.
import { KisteError } from '../errors';

export interface RepositoryInput {
  url: string;
  ref?: string | null;
  path?: string | null;
  credentials_file?: string | null;
}

export interface SecretFileInput {
  path: string;
  content_base64: string;
}

/** A hosted service the environment declares (the API's EnvironmentServiceSpec; shapes checked by the schema). */
export interface DeclaredService {
  name: string;
  port: number;
  description?: string;
  access?: 'account' | 'public';
  wake_on_request?: boolean;
  idle_stop_minutes?: number | null;
}

export interface EnvironmentInput {
  repositories?: RepositoryInput[];
  secret_files?: SecretFileInput[];
  setup_script?: string;
  variables?: Record<string, string>;
  services?: DeclaredService[];
}

export interface Repository {
  url: string;
  ref: string | null;
  /** Absolute checkout directory (the default filled in). */
  path: string;
  credentials_file: string | null;
}

export interface SecretFile {
  path: string;
  content: Buffer;
}

export interface EnvironmentContent {
  repositories: Repository[];
  secretFiles: SecretFile[];
  variables: Record<string, string>;
  setupScript: string;
  services: DeclaredService[];
}

/** Where checkouts without a path go: the home of the user commands run as. */
export const DEFAULT_CHECKOUT_DIR = '/root';
const SAFE_SEGMENT = /^[A-Za-z0-9._@%+=:,~-]+$/;
/** Kernel file systems: a file there is not a file, and writing one at setup can wedge the machine. */
const SYSTEM_TREES = ['/proc', '/sys', '/dev', '/run'];
const REF = /^[A-Za-z0-9._/+@-]+$/;
const SCP_LIKE = /^([A-Za-z0-9._-]+)@([A-Za-z0-9.-]+):([A-Za-z0-9._~/-][A-Za-z0-9._~/+@-]*)$/;
const SECRET_BYTES_MAX = 36 * 1024;

function invalid(param: string, message: string): never {
  throw new KisteError('K32', { message: `${param}: ${message}`, param });
}

function noNul(value: string, param: string): void {
  if (value.includes('\0')) invalid(param, 'NUL bytes are not allowed');
}

/** An absolute, normalised path of plain names: no `.`/`..`, no empty segment, no kernel tree. */
export function checkGuestPath(path: string, param: string): string {
  noNul(path, param);
  if (!path.startsWith('/')) invalid(param, 'the path must be absolute');
  const segments = path.slice(1).split('/');
  if (path === '/' || segments.some((s) => s === '')) invalid(param, 'the path must name a file below / without empty segments or a trailing slash');
  if (segments.some((s) => s === '.' || s === '..')) invalid(param, 'the path must not contain . or .. segments');
  const bad = segments.find((s) => !SAFE_SEGMENT.test(s));
  if (bad !== undefined) invalid(param, `the path segment ${JSON.stringify(bad)} has characters other than letters, digits and ._@%+=:,~-`);
  if (SYSTEM_TREES.some((tree) => path === tree || path.startsWith(`${tree}/`))) invalid(param, `the path must not be under ${SYSTEM_TREES.join(', ')}`);
  return path;
}

export type UrlKind = 'http' | 'ssh' | 'git';

/** A clone URL git reads as a URL and nothing else: https, http, ssh, git or scp-like; no credentials in it. */
export function checkRepositoryUrl(url: string, param: string): UrlKind {
  noNul(url, param);
  if (/[\s\x00-\x1f\x7f]/.test(url)) invalid(param, 'the URL must not contain spaces or control characters');
  if (url.startsWith('-')) invalid(param, 'the URL must not start with "-" (git would read it as an option)');
  const scp = SCP_LIKE.exec(url);
  if (scp) {
    if (scp[2].startsWith('-') || scp[2].startsWith('.')) invalid(param, 'the URL names no valid host');
    return 'ssh';
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return invalid(param, 'the URL must be https://, http://, ssh://, git:// or user@host:path');
  }
  const kind = ({ 'https:': 'http', 'http:': 'http', 'ssh:': 'ssh', 'git:': 'git' } as const)[parsed.protocol];
  if (!kind) invalid(param, `the URL scheme ${parsed.protocol.replace(/:$/, '')} is not allowed (use https, http, ssh or git)`);
  if (!parsed.hostname || parsed.hostname.startsWith('-')) invalid(param, 'the URL names no valid host');
  if (parsed.password || (parsed.username && kind !== 'ssh') || parsed.search || parsed.hash) {
    invalid(param, 'the URL must not carry credentials, a query or a fragment; put credentials in a secret file and name it in credentials_file');
  }
  if (parsed.username.startsWith('-')) invalid(param, 'the URL\'s user name must not start with "-"');
  return kind;
}

export function checkRef(ref: string, param: string): string {
  noNul(ref, param);
  if (!REF.test(ref) || ref.startsWith('-') || ref.includes('..') || ref.includes('//') || ref.endsWith('/') || ref.endsWith('.lock')) {
    invalid(param, 'the ref must be a branch, tag or commit name (letters, digits and ._/+@-, not starting with -)');
  }
  return ref;
}

/** `/root/<name>` from the URL's last segment without `.git`. */
export function defaultCheckoutPath(url: string): string {
  const tail = url.replace(/\/+$/, '').split(/[/:]/).pop() ?? '';
  const name = tail.replace(/\.git$/, '').replace(/[^A-Za-z0-9._-]/g, '-').replace(/^[.-]+/, '');
  return `${DEFAULT_CHECKOUT_DIR}/${name || 'repository'}`;
}

function decodeSecret(file: SecretFileInput, param: string): Buffer {
  const text = file.content_base64;
  noNul(text, param);
  const normalised = text.replace(/=+$/, '');
  const content = Buffer.from(text, 'base64');
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || content.toString('base64').replace(/=+$/, '') !== normalised) {
    invalid(param, 'the content is not valid base64');
  }
  if (content.length > SECRET_BYTES_MAX) invalid(param, `a secret file holds at most ${SECRET_BYTES_MAX} bytes`);
  return content;
}

/**
 * The content of a new version: the fields given, and for an update the fields left out taken
 * from the current version (`previous`).
 */
export function checkEnvironment(input: EnvironmentInput, previous?: EnvironmentContent): EnvironmentContent {
  const secretFiles = input.secret_files === undefined && previous
    ? previous.secretFiles
    : (input.secret_files ?? []).map((file, i) => ({
      path: checkGuestPath(file.path, `secret_files[${i}].path`),
      content: decodeSecret(file, `secret_files[${i}].content_base64`),
    }));
  const secretPaths = new Set<string>();
  secretFiles.forEach((file, i) => {
    if (secretPaths.has(file.path)) invalid(`secret_files[${i}].path`, `the path ${file.path} is given twice`);
    secretPaths.add(file.path);
  });

  const repositories = input.repositories === undefined && previous
    ? previous.repositories
    : (input.repositories ?? []).map((repo, i) => checkRepository(repo, `repositories[${i}]`));
  const checkouts = new Set<string>();
  repositories.forEach((repo, i) => {
    if (checkouts.has(repo.path)) invalid(`repositories[${i}].path`, `two repositories would be checked out at ${repo.path}`);
    checkouts.add(repo.path);
    const inside = [...secretPaths].find((path) => path === repo.path || path.startsWith(`${repo.path}/`));
    if (inside) invalid(`repositories[${i}].path`, `the secret file ${inside} would be in the checkout at ${repo.path} (git clones only into an empty folder)`);
    if (repo.credentials_file !== null && !secretPaths.has(repo.credentials_file)) {
      invalid(`repositories[${i}].credentials_file`, 'credentials_file must be the path of one of the environment\'s secret files');
    }
  });

  const variables = input.variables === undefined && previous ? previous.variables : (input.variables ?? {});
  for (const [name, value] of Object.entries(variables)) noNul(value, `variables.${name}`);
  const setupScript = input.setup_script === undefined && previous ? previous.setupScript : (input.setup_script ?? '');
  noNul(setupScript, 'setup_script');
  const services = input.services === undefined && previous ? previous.services : (input.services ?? []);
  services.forEach((service, i) => {
    if (services.findIndex((other) => other.name === service.name) !== i) invalid(`services[${i}].name`, `the name ${service.name} is given twice`);
    if (services.findIndex((other) => other.port === service.port) !== i) invalid(`services[${i}].port`, `the port ${service.port} is given twice`);
  });
  return { repositories, secretFiles, variables, setupScript, services };
}

function checkRepository(repo: RepositoryInput, param: string): Repository {
  const kind = checkRepositoryUrl(repo.url, `${param}.url`);
  const credentials = repo.credentials_file ?? null;
  if (credentials !== null) {
    checkGuestPath(credentials, `${param}.credentials_file`);
    if (kind === 'git') invalid(`${param}.credentials_file`, 'git:// URLs take no credentials');
  }
  return {
    url: repo.url,
    ref: repo.ref == null ? null : checkRef(repo.ref, `${param}.ref`),
    path: repo.path == null ? defaultCheckoutPath(repo.url) : checkGuestPath(repo.path, `${param}.path`),
    credentials_file: credentials,
  };
}
