// Who may use a private (`access: account`) hosted service (docs/hosted-services.md "Access
// account"): browsers of the owner's account with a cookie of the service's host, minted from a
// one-time code the signed-in console hands out; scripts with an API key of the account; clients
// without cookies with a short-lived token. Only hashes are stored; each is bound to one service, and
// a browser's to the console sign-in it came from. Browsers are let in only where each service has a
// host of its own: under paths of one origin a cookie would reach every service there.
import { KisteError } from '../errors';
import { safeEqual } from '../protocol/safe-equal';
import type { HostedService, HostedServiceStore } from '../store/hosted-services';
import type { ServiceCredentialKind, ServiceCredentialStore } from '../store/service-credentials';
import type { AuthContext } from './auth-context';
import type { Clock } from './clock';
import { hmacBase64Url, newId, newToken, sha256Hex, TOKEN_PREFIX } from './secrets';
import { publishedAt, type ServiceAddresses } from './service-addresses';

const CODE_MS = 60_000;
export const SERVICE_COOKIE_SECONDS = 24 * 3600;
const TOKEN_MS = 5 * 60_000;
/** How long the proxy's signed note that sends a browser to the console holds. */
const STATE_MS = 10 * 60_000;
/** How long a row is kept past its expiry: connections opened with a token live on up to then. */
const KEPT_AFTER_EXPIRY_MS = 24 * 3600_000;
/** Cookies of the name looked at in one request (a Cookie header holds at most a few dozen of ours). */
const MAX_COOKIES = 32;
/** Live ones kept per account, service and kind (the newest): sign-ins in a loop cannot pile up rows. */
const KEEP_PER_KIND: Record<ServiceCredentialKind, number> = { code: 20, cookie: 20, token: 100 };

/**
 * The app path a browser goes to once let in: a path of the app, else its root (no open redirect,
 * and no dot segment that a browser would resolve out of the service).
 */
export function appReturnPath(requested: string): string {
  if (requested.length > 2048 || !requested.startsWith('/') || requested.startsWith('//') || /[^\x21-\x7e]|\\/.test(requested)) return '/';
  const path = requested.split(/[?#]/)[0]!;
  if (path.split('/').some((segment) => /^(?:\.|%2e){1,2}$/i.test(segment))) return '/';
  return requested;
}

/** What a request to a private service brought: kiste's cookies of its host (every one of that name), a bearer token, a token parameter. */
export interface PresentedCredentials {
  cookies: string[];
  bearer?: string;
  token?: string;
}

/**
 * `cookie` / `token` / `key`: let in, by what; `none`: nothing valid came (401, or the console for a
 * page load); `foreign`: another account's key (404, as if there were no service).
 */
export type Admission = 'cookie' | 'token' | 'key' | 'none' | 'foreign';

export class ServiceAccessGate {
  constructor(
    private readonly credentials: ServiceCredentialStore,
    private readonly services: HostedServiceStore,
    private readonly addresses: ServiceAddresses | null,
    private readonly authenticateBearer: (token: string) => Promise<AuthContext>,
    private readonly secretKey: Buffer,
    private readonly clock: Clock,
  ) {}

  /** Whether browsers can be let in with a cookie here (each service has a host of its own). */
  get browsersLetIn(): boolean {
    return this.addresses?.mode === 'subdomain';
  }

  /** The proxy's signed note of a service and path, for the console to check that the redirect was the proxy's. */
  stateFor(serviceId: string, returnTo: string): string {
    const at = this.clock.now().getTime().toString(36);
    return `${at}.${this.stateMac(serviceId, returnTo, at)}`;
  }

  /**
   * The signed-in console's step: for a service of the account, where the browser goes next (the
   * service's `/__kiste/auth` with a one-time code); S10 for any other, as if it did not exist. A
   * `state` given must be the proxy's, fresh, for this service and path (A03).
   */
  async authorize(auth: { accountId: string; credentialId: string }, serviceId: string, returnTo: string, state: string | undefined): Promise<string> {
    const service = await this.services.findById(auth.accountId, serviceId);
    if (!service || !this.addresses) throw new KisteError('S10', { message: 'No such service in this account', param: 'service_id' });
    if (!this.browsersLetIn) throw new KisteError('S14');
    if (state !== undefined && !this.stateHolds(state, serviceId, returnTo)) {
      throw new KisteError('A03', { message: 'The link to this service is stale or was not made by kiste', param: 'state' });
    }
    const code = await this.issue(service, 'code', CODE_MS, appReturnPath(returnTo), auth.credentialId);
    return `${publishedAt(this.addresses, service.name, service.key).publicUrl}__kiste/auth?code=${encodeURIComponent(code)}`;
  }

  /** A token for clients without cookies (WebSockets outside a browser), valid for a few minutes. */
  async token(service: HostedService): Promise<{ token: string; expiresAt: Date }> {
    const token = await this.issue(service, 'token', TOKEN_MS, '/', null);
    return { token, expiresAt: new Date(this.clock.now().getTime() + TOKEN_MS) };
  }

  /** Trades a code (once, while fresh) for a cookie of the service's host; null when it is not one. */
  async trade(service: HostedService, code: string): Promise<{ cookie: string; returnTo: string } | null> {
    if (!this.browsersLetIn || !code.startsWith(TOKEN_PREFIX.serviceCode) || code.length > 200) return null;
    const found = await this.credentials.find(service.id, 'code', sha256Hex(code), this.clock.now());
    if (!found || found.accountId !== service.accountId || !(await this.credentials.take(found.id))) return null;
    return { cookie: await this.issue(service, 'cookie', SERVICE_COOKIE_SECONDS * 1000, '/', found.sessionId), returnTo: found.returnTo };
  }

  /** Whether what the request brought lets it into the service, and by what. */
  async admit(service: HostedService, presented: PresentedCredentials): Promise<Admission> {
    const now = this.clock.now();
    // Every cookie of the name in one look-up (planted ones ahead of the real one cannot push it out).
    const hashesOf = (values: string[], prefix: string) => [...new Set(values.filter((value) => value.startsWith(prefix) && value.length <= 200))].slice(0, MAX_COOKIES).map(sha256Hex);
    const offered = [
      ['cookie', this.browsersLetIn ? hashesOf(presented.cookies, TOKEN_PREFIX.serviceCookie) : []],
      ['token', hashesOf(presented.token ? [presented.token] : [], TOKEN_PREFIX.serviceToken)],
    ] as const;
    for (const [kind, hashes] of offered) {
      const found = await this.credentials.findAny(service.id, kind, hashes, now);
      if (found && found.accountId === service.accountId) return kind;
    }
    if (presented.bearer) {
      const auth = await this.authenticateBearer(presented.bearer).catch(() => null);
      if (auth) return auth.accountId === service.accountId ? 'key' : 'foreign';
    }
    return 'none';
  }

  /**
   * Whether an open connection let in as `admission` still would be: its cookie still live, its
   * token not ended (a token opens a connection that may outlive the token's few minutes, up to a
   * day), its key still the account's. Let in as nothing (the service was public): no.
   */
  async stillAdmits(service: HostedService, presented: PresentedCredentials, admission: Admission): Promise<boolean> {
    const now = this.clock.now();
    if (admission === 'cookie') return (await this.admit(service, { cookies: presented.cookies })) === 'cookie';
    if (admission === 'token' && presented.token) {
      const found = await this.credentials.find(service.id, 'token', sha256Hex(presented.token), new Date(now.getTime() - KEPT_AFTER_EXPIRY_MS));
      return found !== null && found.accountId === service.accountId;
    }
    if (admission === 'key' && presented.bearer) return (await this.admit(service, { cookies: [], bearer: presented.bearer })) === 'key';
    return false;
  }

  /** Signing out everywhere (or a deletion requested) ends the account's service cookies and tokens. */
  endForAccount(accountId: string): Promise<number> {
    return this.credentials.endForAccount(accountId);
  }

  /** A console sign-in that ends takes the service cookies it let in along. */
  endForSession(accountId: string, sessionId: string): Promise<number> {
    return this.credentials.endForSession(accountId, sessionId);
  }

  /** A service whose access changed starts afresh: nothing from before lets anyone in. */
  endForService(serviceId: string): Promise<number> {
    return this.credentials.endForService(serviceId);
  }

  /** Rows a day past their expiry (a connection a token opened is looked at until then). */
  removeExpired(): Promise<number> {
    return this.credentials.removeExpired(new Date(this.clock.now().getTime() - KEPT_AFTER_EXPIRY_MS));
  }

  private stateHolds(state: string, serviceId: string, returnTo: string): boolean {
    const [at, mac] = state.split('.');
    if (!at || !mac || !/^[0-9a-z]{1,12}$/.test(at)) return false;
    const age = this.clock.now().getTime() - parseInt(at, 36);
    if (!(age >= -60_000 && age <= STATE_MS)) return false;
    return safeEqual(mac, this.stateMac(serviceId, returnTo, at));
  }

  private stateMac(serviceId: string, returnTo: string, at: string): string {
    return hmacBase64Url(this.secretKey, `service-access:${serviceId}:${returnTo}:${at}`);
  }

  private async issue(service: HostedService, kind: ServiceCredentialKind, lifetimeMs: number, returnTo: string, sessionId: string | null): Promise<string> {
    const prefix = { code: TOKEN_PREFIX.serviceCode, cookie: TOKEN_PREFIX.serviceCookie, token: TOKEN_PREFIX.serviceToken }[kind];
    const secret = newToken(prefix);
    const now = this.clock.now();
    await this.credentials.issue({
      id: newId(), serviceId: service.id, accountId: service.accountId, kind, tokenHash: sha256Hex(secret), returnTo, sessionId,
      createdAt: now, expiresAt: new Date(now.getTime() + lifetimeMs),
    }, KEEP_PER_KIND[kind]);
    return secret;
  }
}
