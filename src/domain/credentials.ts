// Turns a presented secret into who is calling. API keys and CLI tokens come as bearer tokens,
// browser sessions as a cookie; only SHA-256 hashes are stored. CSRF tokens for browser sessions
// are an HMAC of the session id under the installation's secret, so nothing extra is stored.
import { KisteError } from '../errors';
import type { ApiTokenStore } from '../store/api-tokens';
import type { SessionStore } from '../store/sessions';
import type { AuthContext, CredentialKind } from './auth-context';
import type { Clock } from './clock';
import { CredentialCache } from './credential-cache';
import { safeEqual } from '../protocol/safe-equal';
import { hmacBase64Url, sha256Hex, TOKEN_PREFIX } from './secrets';

/** last_used_at is written at most this often per credential, to keep reads cheap. */
const TOUCH_INTERVAL_MS = 5_000;

/** Tells every process of the service (control-plane replicas) that an account's credentials changed. */
export interface CredentialChangeFeed {
  /** Announces the change here and to the other processes; resolves once it is sent. */
  publish(accountId: string): Promise<void>;
  /** Calls `listener` for each announcement, from this process or another; null: any account may have changed. */
  subscribe(listener: (accountId: string | null) => void): unknown;
}

export class Credentials {
  private readonly cache: CredentialCache;

  constructor(
    private readonly stores: { apiTokens: ApiTokenStore; sessions: SessionStore },
    private readonly secretKey: Buffer,
    private readonly clock: Clock,
    private readonly changes: CredentialChangeFeed,
    cacheTtlMs?: number,
  ) {
    this.cache = new CredentialCache(cacheTtlMs);
    changes.subscribe((accountId) => (accountId === null ? this.cache.forgetAll() : this.cache.forgetAccount(accountId)));
  }

  authenticateBearer(token: string): Promise<AuthContext> {
    if (token.startsWith(TOKEN_PREFIX.apiKey)) return this.authenticate(token, 'api_key');
    if (token.startsWith(TOKEN_PREFIX.cliToken)) return this.authenticate(token, 'cli');
    return Promise.reject(invalid());
  }

  authenticateBrowser(cookieValue: string): Promise<AuthContext> {
    if (!cookieValue.startsWith(TOKEN_PREFIX.browserSession)) return Promise.reject(invalid());
    return this.authenticate(cookieValue, 'browser');
  }

  /**
   * Drops cached credentials of the account, in every process: call after anything that ends or
   * changes them (and before answering, so no replica accepts what the caller was told is gone).
   */
  async forgetAccount(accountId: string): Promise<void> {
    // Dropped here before anything is sent; should the announcement fail, the other processes
    // still read the account afresh within the cache's time to live.
    await this.changes.publish(accountId).catch(() => undefined);
  }

  csrfFor(sessionId: string): string {
    return hmacBase64Url(this.secretKey, `csrf:${sessionId}`);
  }

  csrfMatches(sessionId: string, offered: string): boolean {
    return safeEqual(this.csrfFor(sessionId), offered);
  }

  private async authenticate(token: string, kind: CredentialKind): Promise<AuthContext> {
    const now = this.clock.now();
    const hash = sha256Hex(token);
    let entry = this.cache.get(hash, now);
    if (!entry) {
      const readFrom = this.cache.position();
      const found = kind === 'api_key'
        ? await this.stores.apiTokens.findActiveByHash(hash, now)
        : await this.stores.sessions.findActiveByHash(hash, kind, now);
      if (!found) throw invalid();
      const auth = { accountId: found.accountId, kind, credentialId: found.id, account: found.account };
      entry = this.cache.set(hash, { auth, expiresAt: found.expiresAt, lastUsedAt: found.lastUsedAt }, now, readFrom);
    }
    if (!entry.lastUsedAt || now.getTime() - entry.lastUsedAt.getTime() >= TOUCH_INTERVAL_MS) {
      if (kind === 'api_key') await this.stores.apiTokens.touch(entry.auth.credentialId, now);
      else await this.stores.sessions.touch(entry.auth.credentialId, now);
      entry.lastUsedAt = now;
    }
    return entry.auth;
  }
}

function invalid(): KisteError {
  return new KisteError('A02');
}
