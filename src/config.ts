// Configuration from the environment, read once at start. Every variable is documented in README.md.
import { isIP } from 'node:net';
import { resolve } from 'node:path';
import { parseCidr, type Cidr } from './net/special-addresses';
import type { ImageProfile } from './compute/machine-host';
import { serviceAddressesOf } from './config-services';
import type { ServiceAddresses } from './domain/service-addresses';

export interface Config {
  listenHost: string;
  listenPort: number;
  dataDir: string;
  databaseUrl: string | undefined;
  adminEmail: string | undefined;
  adminPassword: string | undefined;
  tls: { certFile: string; keyFile: string } | null;
  baseUrl: string;
  consoleUrl: string;
  desktopUrl: string;
  openSignup: boolean;
  requestsPerMinute: number;
  signInAttemptsPerMinute: number;
  logLevel: string;
  /** KISTE_LOG_FORMAT: `auto` (readable lines on a terminal, JSON lines otherwise), `pretty` or `json`. */
  logFormat: 'auto' | 'pretty' | 'json';
  version: string;
  /**
   * Host image that stands for the universal image: `desktop` (Xfce on the machine's display, the
   * default), `minimal` (no desktop, boots fast: tests and small hosts) or `desktop-lite` (a display
   * with an xterm session and no Xfce: the desktop tests).
   */
  imageProfile: ImageProfile;
  imagesDir: string;
  /**
   * KISTE_IMAGE_CACHE_DIR: the image builder's root filesystems and downloaded packages (default
   * `<imagesDir>/cache`); several installations, or a data folder made anew, may share one.
   */
  imageCacheDir: string | undefined;
  /**
   * New machines restore a boot snapshot of their image and configuration instead of booting
   * (made in the background after the first create of a configuration and after image builds).
   */
  bootSnapshots: boolean;
  /** auto: probe KVM once, else TCG. */
  accelerator: 'auto' | 'kvm' | 'tcg';
  /**
   * KISTE_COMPUTE: where machines run. `worker` (default): in a local kiste-worker process the
   * service starts and supervises, so a fault in compute never takes the API down (503 N01 while it
   * is started again); `workers`: on the workers registered with `npm run admin -- worker add`
   * (several hosts; this host runs no machine itself); `in-process`: in the service's own process
   * (the older layout, kept while the test suites move over).
   */
  compute: 'worker' | 'workers' | 'in-process';
  /**
   * What machines may reach (KISTE_MACHINE_EGRESS, KISTE_MACHINE_EGRESS_ALLOW): the public internet
   * plus the allowed CIDRs, or nothing at all. Never the host itself.
   */
  machineEgress: { mode: 'public' | 'off'; allow: Cidr[] };
  /** KISTE_MACHINE_UID_BASE: machines' QEMUs run as uids base+1 … base+65535, group base. */
  machineUidBase: number;
  /** KISTE_SERVICES_DOMAIN / KISTE_SERVICES_URL: where hosted services are published (null: nowhere, S12). */
  services: ServiceAddresses | null;
  /** KISTE_WEBHOOKS_ALLOW_PRIVATE_TARGETS_UNSAFE: webhooks may target http://, any port and private addresses (development and tests only). */
  webhooksAllowPrivateTargetsUnsafe: boolean;
  /** SMTP relay for alert e-mail (KISTE_SMTP_URL, KISTE_MAIL_FROM); null: alerts are not e-mailed. */
  smtp: { url: string; from: string } | null;
  /**
   * TURN relay for desktop viewers on strict networks (KISTE_TURN_URLS, KISTE_TURN_SECRET: coturn's
   * static-auth-secret); null: ICE host candidates only.
   */
  turn: { urls: string[]; secret: string } | null;
  /**
   * The Prometheus scrape endpoint (KISTE_METRICS_LISTEN, KISTE_METRICS_TOKEN): a listener of its
   * own, never the public one; null: none. Off loopback it needs the token.
   */
  metrics: { host: string; port: number; token: string | null } | null;
}

export class ConfigError extends Error {}

function flag(value: string | undefined): boolean {
  return value !== undefined && ['1', 'true', 'yes', 'on'].includes(value.toLowerCase());
}

function positiveInt(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined || value === '') return fallback;
  const parsed = Number(value);
  if (!Number.isInteger(parsed) || parsed <= 0) throw new ConfigError(`${name} must be a positive integer, got "${value}"`);
  return parsed;
}

function oneOf<T extends string>(name: string, value: string | undefined, allowed: readonly T[], fallback: T): T {
  if (value === undefined || value === '') return fallback;
  if (!(allowed as readonly string[]).includes(value)) throw new ConfigError(`${name} must be one of ${allowed.join(', ')}, got "${value}"`);
  return value as T;
}

export function cidrList(name: string, value: string | undefined): Cidr[] {
  if (!value?.trim()) return [];
  return value.split(',').map((part) => {
    const cidr = parseCidr(part);
    if (!cidr) throw new ConfigError(`${name} must be comma-separated addresses or CIDRs (10.1.0.0/16, 2001:db8::/32), got "${part.trim()}"`);
    return cidr;
  });
}

/**
 * Default 0x70000000 (1879048192): above people, system services, systemd's dynamic users and its
 * container range (524288–1879048191), below its foreign range (0x7FFE0000) and 2^31.
 */
export const DEFAULT_MACHINE_UID_BASE = 0x7000_0000;

function uidBase(value: string | undefined): number {
  const base = positiveInt('KISTE_MACHINE_UID_BASE', value, DEFAULT_MACHINE_UID_BASE);
  if (base < 65_536 || base + 65_535 >= 2 ** 32 - 1) throw new ConfigError(`KISTE_MACHINE_UID_BASE must lie between 65536 and ${2 ** 32 - 65_537}, got ${base}`);
  return base;
}

export function parseListen(value: string, name = 'KISTE_LISTEN'): { host: string; port: number } {
  const match = /^(?:\[([^\]]+)\]|([^:]*)):(\d+)$/.exec(value);
  if (!match) throw new ConfigError(`${name} must be host:port, got "${value}"`);
  const port = Number(match[3]);
  if (port > 65535) throw new ConfigError(`${name} port out of range: ${port}`);
  return { host: match[1] ?? match[2] ?? '127.0.0.1', port };
}

export function isLoopbackHost(host: string): boolean {
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return host === '::1';
}

function trimSlash(url: string): string {
  return url.replace(/\/+$/, '');
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const { host, port } = parseListen(env.KISTE_LISTEN ?? '127.0.0.1:8080');
  const certFile = env.KISTE_TLS_CERT;
  const keyFile = env.KISTE_TLS_KEY;
  if (Boolean(certFile) !== Boolean(keyFile)) throw new ConfigError('KISTE_TLS_CERT and KISTE_TLS_KEY must be set together');
  const tls = certFile && keyFile ? { certFile, keyFile } : null;
  if (!tls && !isLoopbackHost(host) && !flag(env.KISTE_ALLOW_PLAIN_HTTP)) {
    throw new ConfigError(
      `refusing plain HTTP on ${host}: set KISTE_TLS_CERT and KISTE_TLS_KEY, or KISTE_ALLOW_PLAIN_HTTP=1 behind a TLS proxy`,
    );
  }
  const shownHost = host.includes(':') ? `[${host}]` : host;
  const baseUrl = trimSlash(env.KISTE_BASE_URL ?? `${tls ? 'https' : 'http'}://${shownHost}:${port}`);
  const consoleUrl = trimSlash(env.KISTE_CONSOLE_URL ?? baseUrl);
  const desktopUrl = trimSlash(env.KISTE_DESKTOP_URL ?? baseUrl);
  return {
    listenHost: host,
    listenPort: port,
    dataDir: resolve(env.KISTE_DATA_DIR ?? 'data'),
    databaseUrl: env.KISTE_DATABASE_URL || undefined,
    adminEmail: env.KISTE_ADMIN_EMAIL || undefined,
    adminPassword: env.KISTE_ADMIN_PASSWORD || undefined,
    tls,
    baseUrl,
    consoleUrl,
    desktopUrl,
    openSignup: flag(env.KISTE_OPEN_SIGNUP),
    requestsPerMinute: positiveInt('KISTE_REQUESTS_PER_MINUTE', env.KISTE_REQUESTS_PER_MINUTE, 600),
    signInAttemptsPerMinute: positiveInt('KISTE_SIGN_IN_ATTEMPTS_PER_MINUTE', env.KISTE_SIGN_IN_ATTEMPTS_PER_MINUTE, 30),
    logLevel: env.KISTE_LOG_LEVEL ?? 'info',
    logFormat: oneOf('KISTE_LOG_FORMAT', env.KISTE_LOG_FORMAT, ['auto', 'pretty', 'json'] as const, 'auto'),
    version: env.npm_package_version ?? '0.1.0',
    imageProfile: oneOf('KISTE_IMAGE_PROFILE', env.KISTE_IMAGE_PROFILE, ['minimal', 'desktop', 'desktop-lite'] as const, 'desktop'),
    imagesDir: resolve(env.KISTE_IMAGE_DIR ?? resolve(env.KISTE_DATA_DIR ?? 'data', 'images')),
    imageCacheDir: env.KISTE_IMAGE_CACHE_DIR ? resolve(env.KISTE_IMAGE_CACHE_DIR) : undefined,
    bootSnapshots: oneOf('KISTE_BOOT_SNAPSHOTS', env.KISTE_BOOT_SNAPSHOTS, ['on', 'off'] as const, 'on') === 'on',
    accelerator: oneOf('KISTE_ACCELERATOR', env.KISTE_ACCELERATOR, ['auto', 'kvm', 'tcg'] as const, 'auto'),
    compute: oneOf('KISTE_COMPUTE', env.KISTE_COMPUTE, ['worker', 'workers', 'in-process'] as const, 'worker'),
    machineEgress: {
      mode: oneOf('KISTE_MACHINE_EGRESS', env.KISTE_MACHINE_EGRESS, ['public', 'off'] as const, 'public'),
      allow: cidrList('KISTE_MACHINE_EGRESS_ALLOW', env.KISTE_MACHINE_EGRESS_ALLOW),
    },
    machineUidBase: uidBase(env.KISTE_MACHINE_UID_BASE),
    webhooksAllowPrivateTargetsUnsafe: flag(env.KISTE_WEBHOOKS_ALLOW_PRIVATE_TARGETS_UNSAFE),
    services: serviceAddressesOf(env, { baseUrl, consoleUrl, desktopUrl }),
    smtp: smtpSettings(env.KISTE_SMTP_URL, env.KISTE_MAIL_FROM, baseUrl),
    turn: turnSettings(env.KISTE_TURN_URLS, env.KISTE_TURN_SECRET),
    metrics: metricsSettings(env.KISTE_METRICS_LISTEN, env.KISTE_METRICS_TOKEN),
  };
}

function metricsSettings(listen: string | undefined, token: string | undefined): Config['metrics'] {
  if (!listen) {
    if (token) throw new ConfigError('KISTE_METRICS_TOKEN is set but KISTE_METRICS_LISTEN is not');
    return null;
  }
  const { host, port } = parseListen(listen, 'KISTE_METRICS_LISTEN');
  if (token !== undefined && token.length < 16) throw new ConfigError('KISTE_METRICS_TOKEN must be at least 16 characters');
  if (!token && !isLoopbackHost(host)) throw new ConfigError(`KISTE_METRICS_LISTEN on ${host} (not loopback) needs KISTE_METRICS_TOKEN`);
  return { host, port, token: token || null };
}

/** The relay URL (smtp:// or smtps://) and the From address: KISTE_MAIL_FROM, else the relay user when it is an address, else kiste@<base URL host name> (localhost for an IP address). */
function turnSettings(urls: string | undefined, secret: string | undefined): Config['turn'] {
  if (!urls?.trim()) {
    if (secret) throw new ConfigError('KISTE_TURN_SECRET is set but KISTE_TURN_URLS is not');
    return null;
  }
  if (!secret) throw new ConfigError('KISTE_TURN_URLS needs KISTE_TURN_SECRET (the TURN server\'s static-auth-secret)');
  const list = urls.split(',').map((url) => url.trim());
  for (const url of list) {
    if (!/^turns?:[^\s,]+$/.test(url)) throw new ConfigError(`KISTE_TURN_URLS must be comma-separated turn: or turns: URLs, got "${url}"`);
  }
  return { urls: list, secret };
}

function smtpSettings(url: string | undefined, from: string | undefined, baseUrl: string): Config['smtp'] {
  if (!url) {
    if (from) throw new ConfigError('KISTE_MAIL_FROM is set but KISTE_SMTP_URL is not');
    return null;
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ConfigError('KISTE_SMTP_URL must be a URL such as smtp://user:password@host:587 or smtps://host:465');
  }
  if (parsed.protocol !== 'smtp:' && parsed.protocol !== 'smtps:') throw new ConfigError(`KISTE_SMTP_URL must start with smtp:// or smtps://, got ${parsed.protocol}//`);
  if (!parsed.hostname) throw new ConfigError('KISTE_SMTP_URL names no host');
  const user = decodeURIComponent(parsed.username);
  const host = new URL(baseUrl).hostname;
  return { url, from: from || (user.includes('@') ? user : `kiste@${isIP(host.replace(/^\[|\]$/g, '')) ? 'localhost' : host}`) };
}
