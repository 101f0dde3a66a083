// Who may use a private (`access: account`) hosted service (docs/hosted-services.md "Access
// account"): browsers of the owner's account with a cookie of the service's host, minted from a
// one-time code the signed-in console hands out; scripts with an API key of the account; clients
// without cookies with a short-lived token. Only hashes are stored; each is bound to one service.
import { KisteError } from '../errors';
import type { HostedService, HostedServiceStore } from '../store/hosted-services';
import type { ServiceCredentialKind, ServiceCredentialStore } from '../store/service-credentials';
import type { AuthContext } from './auth-context';
import type { Clock } from './clock';
import { newId, newToken, sha256Hex, TOKEN_PREFIX } from './secrets';
import { publishedAt, type ServiceAddresses } from './service-addresses';

const CODE_MS = 60_000;
export const SERVICE_COOKIE_SECONDS = 24 * 3600;
const TOKEN_MS = 5 * 60_000;

/** The app path a browser goes to once let in: a path of the app, else its root (no open redirect). */
export function appReturnPath(requested: string): string {
  if (requested.length > 2048 || !requested.startsWith('/') || requested.startsWith('//') || /[\u0000-\u001f\u007f\\]/.test(requested)) return '/';
  return requested;
}

/** What a request to a private service brought: kiste's cookie of its host, a bearer token, a token parameter. */
export interface PresentedCredentials {
  cookie?: string;
  bearer?: string;
  token?: string;
}

/** `admitted`; `none`: nothing valid came (401, or the console for a page load); `foreign`: another account's key (404, as if there were no service). */
export type Admission = 'admitted' | 'none' | 'foreign';

export class ServiceAccessGate {
  constructor(
    private readonly credentials: ServiceCredentialStore,
    private readonly services: HostedServiceStore,
    private readonly addresses: ServiceAddresses | null,
    private readonly authenticateBearer: (token: string) => Promise<AuthContext>,
    private readonly clock: Clock,
  ) {}

  /**
   * The signed-in console's step: for a service of the account, where the browser goes next (the
   * service's `/__kiste/auth` with a one-time code); S10 for any other, as if it did not exist.
   */
  async authorize(accountId: string, serviceId: string, returnTo: string): Promise<string> {
    const service = await this.services.findById(accountId, serviceId);
    if (!service || !this.addresses) throw new KisteError('S10', { message: 'No such service in this account', param: 'service_id' });
    const code = await this.issue(service, 'code', CODE_MS, appReturnPath(returnTo));
    return `${publishedAt(this.addresses, service.name, service.key).publicUrl}__kiste/auth?code=${encodeURIComponent(code)}`;
  }

  /** A token for clients without cookies (WebSockets outside a browser), valid for a few minutes. */
  async token(service: HostedService): Promise<{ token: string; expiresAt: Date }> {
    const token = await this.issue(service, 'token', TOKEN_MS, '/');
    return { token, expiresAt: new Date(this.clock.now().getTime() + TOKEN_MS) };
  }

  /** Trades a code (once, while fresh) for a cookie of the service's host; null when it is not one. */
  async trade(service: HostedService, code: string): Promise<{ cookie: string; returnTo: string } | null> {
    if (!code.startsWith(TOKEN_PREFIX.serviceCode) || code.length > 200) return null;
    const found = await this.credentials.find(service.id, 'code', sha256Hex(code), this.clock.now());
    if (!found || found.accountId !== service.accountId || !(await this.credentials.take(found.id))) return null;
    return { cookie: await this.issue(service, 'cookie', SERVICE_COOKIE_SECONDS * 1000, '/'), returnTo: found.returnTo };
  }

  /** Whether what the request brought lets it into the service. */
  async admit(service: HostedService, presented: PresentedCredentials): Promise<Admission> {
    const now = this.clock.now();
    for (const [kind, prefix, value] of [['cookie', TOKEN_PREFIX.serviceCookie, presented.cookie], ['token', TOKEN_PREFIX.serviceToken, presented.token]] as const) {
      if (!value || !value.startsWith(prefix) || value.length > 200) continue;
      const found = await this.credentials.find(service.id, kind, sha256Hex(value), now);
      if (found && found.accountId === service.accountId) return 'admitted';
    }
    if (presented.bearer) {
      const auth = await this.authenticateBearer(presented.bearer).catch(() => null);
      if (auth) return auth.accountId === service.accountId ? 'admitted' : 'foreign';
    }
    return 'none';
  }

  /** Signing out everywhere ends the account's service cookies and tokens. */
  endForAccount(accountId: string): Promise<number> {
    return this.credentials.endForAccount(accountId);
  }

  private async issue(service: HostedService, kind: ServiceCredentialKind, lifetimeMs: number, returnTo: string): Promise<string> {
    const prefix = { code: TOKEN_PREFIX.serviceCode, cookie: TOKEN_PREFIX.serviceCookie, token: TOKEN_PREFIX.serviceToken }[kind];
    const secret = newToken(prefix);
    const now = this.clock.now();
    await this.credentials.issue({
      id: newId(), serviceId: service.id, accountId: service.accountId, kind, tokenHash: sha256Hex(secret), returnTo,
      createdAt: now, expiresAt: new Date(now.getTime() + lifetimeMs),
    });
    return secret;
  }
}
