// Turns a presented secret into who is calling. API keys and CLI tokens come as bearer tokens,
// browser sessions as a cookie; only SHA-256 hashes are stored. CSRF tokens for browser sessions
// are an HMAC of the session id under the installation's secret, so nothing extra is stored.
import { KisteError } from '../errors';
import type { ApiTokenStore } from '../store/api-tokens';
import type { SessionStore } from '../store/sessions';
import type { AuthContext } from './auth-context';
import type { Clock } from './clock';
import { hmacBase64Url, safeEqual, sha256Hex, TOKEN_PREFIX } from './secrets';

/** last_used_at is written at most this often per credential, to keep reads cheap. */
const TOUCH_INTERVAL_MS = 5_000;

export class Credentials {
  constructor(
    private readonly stores: { apiTokens: ApiTokenStore; sessions: SessionStore },
    private readonly secretKey: Buffer,
    private readonly clock: Clock,
  ) {}

  async authenticateBearer(token: string): Promise<AuthContext> {
    const now = this.clock.now();
    if (token.startsWith(TOKEN_PREFIX.apiKey)) {
      const key = await this.stores.apiTokens.findActiveByHash(sha256Hex(token), now);
      if (!key) throw invalid();
      if (!key.lastUsedAt || now.getTime() - key.lastUsedAt.getTime() >= TOUCH_INTERVAL_MS) await this.stores.apiTokens.touch(key.id, now);
      return { accountId: key.accountId, kind: 'api_key', credentialId: key.id };
    }
    if (token.startsWith(TOKEN_PREFIX.cliToken)) return this.sessionAuth(token, 'cli', now);
    throw invalid();
  }

  authenticateBrowser(cookieValue: string): Promise<AuthContext> {
    if (!cookieValue.startsWith(TOKEN_PREFIX.browserSession)) return Promise.reject(invalid());
    return this.sessionAuth(cookieValue, 'browser', this.clock.now());
  }

  csrfFor(sessionId: string): string {
    return hmacBase64Url(this.secretKey, `csrf:${sessionId}`);
  }

  csrfMatches(sessionId: string, offered: string): boolean {
    return safeEqual(this.csrfFor(sessionId), offered);
  }

  private async sessionAuth(token: string, kind: 'browser' | 'cli', now: Date): Promise<AuthContext> {
    const session = await this.stores.sessions.findActiveByHash(sha256Hex(token), kind, now);
    if (!session) throw invalid();
    if (!session.lastUsedAt || now.getTime() - session.lastUsedAt.getTime() >= TOUCH_INTERVAL_MS) await this.stores.sessions.touch(session.id, now);
    return { accountId: session.accountId, kind, credentialId: session.id };
  }
}

function invalid(): KisteError {
  return new KisteError('A02');
}
