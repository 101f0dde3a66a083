// Password sign-in for the console, the account's sign-ins (browser and CLI), logout and the
// lock on password sign-in from unknown browsers.
import { KisteError } from '../errors';
import type { AccountStore } from '../store/accounts';
import { raiseAlert } from '../store/alerts';
import { appendEvent } from '../store/events';
import type { Session, SessionKind, SessionStore } from '../store/sessions';
import type { AuthContext } from './auth-context';
import type { Clock } from './clock';
import type { Limits } from './limits';
import { decoyPasswordHash, newId, newToken, sha256Hex, TOKEN_PREFIX, verifyPassword } from './secrets';
import type { Transactions } from './transactions';

const BROWSER_SESSION_MS = 14 * 24 * 3600_000;
const CLI_SESSION_MS = 90 * 24 * 3600_000;

export interface ClientInfo {
  userAgent: string | null;
  ip: string | null;
}

export interface BrowserSignIn {
  session: Session;
  /** Cookie value of the new session (secret). */
  sessionToken: string;
  /** Long-lived marker that makes this browser known to the account. */
  browserToken: string;
}

export class SignIn {
  constructor(
    private readonly transactions: Transactions,
    private readonly stores: { accounts: AccountStore; sessions: SessionStore },
    private readonly limits: Limits,
    private readonly clock: Clock,
    /** Drops cached credentials of an account changed outside an authenticated request. */
    private readonly forgetAccount: (accountId: string) => Promise<void>,
  ) {}

  async passwordSignIn(email: string, password: string, browserToken: string | undefined, client: ClientInfo): Promise<BrowserSignIn> {
    const account = await this.stores.accounts.findByEmail(email.trim().toLowerCase());
    if (!account) {
      await verifyPassword(password, await decoyPasswordHash()); // same cost as a real check
      throw new KisteError('A05');
    }
    const knownBrowser =
      browserToken?.startsWith(TOKEN_PREFIX.browserId) === true &&
      (await this.stores.sessions.isKnownBrowser(account.id, sha256Hex(browserToken)));
    if (account.signInLockedAt && !knownBrowser) throw new KisteError('A06');
    if (account.deletionRequestedAt) throw new KisteError('A05');
    if (!(await verifyPassword(password, account.passwordHash))) {
      if (!knownBrowser) {
        const now = this.clock.now();
        const updated = await this.stores.accounts.recordUnknownBrowserFailure(
          account.id, now, this.limits.signInFailureWindowMs, this.limits.signInFailuresBeforeLock,
        );
        await this.forgetAccount(account.id);
        if (updated.signInLockedAt) throw new KisteError('A06');
      }
      throw new KisteError('A05');
    }
    if (account.failedSignIns > 0) await this.stores.accounts.clearFailures(account.id);
    return this.startBrowserSession(account.id, knownBrowser ? browserToken : undefined, client, { alertNewBrowser: !knownBrowser });
  }

  /**
   * Signs a browser in; it becomes (or stays) known to the account. With `alertNewBrowser` (a
   * password sign-in from a browser the account does not know) a `new_sign_in` alert is raised,
   * unless the account never had a known browser (its first sign-in, e.g. right after sign-up).
   */
  async startBrowserSession(accountId: string, knownBrowserToken: string | undefined, client: ClientInfo, options: { alertNewBrowser?: boolean } = {}): Promise<BrowserSignIn> {
    const marker = knownBrowserToken ?? newToken(TOKEN_PREFIX.browserId);
    const { session, token } = await this.startSession(accountId, 'browser', client, null, sha256Hex(marker), options.alertNewBrowser === true);
    return { session, sessionToken: token, browserToken: marker };
  }

  /** Starts a sign-in; for browsers also remembers the browser as known to the account. */
  async startSession(accountId: string, kind: SessionKind, client: ClientInfo, device: string | null, browserHash?: string, alertNewBrowser = false): Promise<{ session: Session; token: string }> {
    const now = this.clock.now();
    const token = newToken(kind === 'browser' ? TOKEN_PREFIX.browserSession : TOKEN_PREFIX.cliToken);
    const session = await this.transactions.run(async (tx) => {
      const created = await this.stores.sessions.create(tx, {
        id: newId(),
        accountId,
        kind,
        tokenHash: sha256Hex(token),
        createdAt: now,
        expiresAt: new Date(now.getTime() + (kind === 'browser' ? BROWSER_SESSION_MS : CLI_SESSION_MS)),
        userAgent: client.userAgent,
        ip: client.ip,
        device,
      });
      // Read before this browser is remembered: on the account's first browser sign-in there is none.
      const alertBrowser = browserHash !== undefined && alertNewBrowser && (await this.stores.sessions.hasKnownBrowser(tx, accountId));
      if (browserHash) await this.stores.sessions.rememberBrowser(tx, newId(), accountId, browserHash, now);
      await appendEvent(tx, accountId, {
        type: 'session.created', resourceType: 'session', resourceId: created.id, data: { kind, device },
      });
      if (alertBrowser) {
        const from = [client.userAgent ? `browser "${client.userAgent.slice(0, 300)}"` : 'a browser that sent no user agent', client.ip ? `address ${client.ip}` : null];
        await raiseAlert(tx, accountId, {
          kind: 'new_sign_in',
          title: 'New sign-in from a browser not used before',
          detail: `Your kiste account was signed in to with its password at ${now.toISOString()} from ${from.filter(Boolean).join(' at ')}. If this was not you, end that sign-in (DELETE /v1/sessions/${created.id}) or every sign-in (POST /v1/sessions/revoke-all), and have the password changed.`,
          resourceType: 'session',
          resourceId: created.id,
        });
      }
      return created;
    });
    return { session, token };
  }

  list(accountId: string): Promise<Session[]> {
    return this.stores.sessions.listActive(accountId, this.clock.now());
  }

  async revoke(accountId: string, sessionId: string): Promise<void> {
    const now = this.clock.now();
    const revoked = await this.transactions.run(async (tx) => {
      const { count } = await this.stores.sessions.revoke(tx, accountId, sessionId, now);
      if (count === 1) {
        await appendEvent(tx, accountId, { type: 'session.revoked', resourceType: 'session', resourceId: sessionId, data: {} });
      }
      return count === 1;
    });
    await this.forgetAccount(accountId);
    if (!revoked) throw new KisteError('A11');
  }

  /** Ends every browser and CLI sign-in, the caller's included; API keys stay valid. */
  async revokeAll(accountId: string): Promise<number> {
    const now = this.clock.now();
    return this.transactions.run(async (tx) => {
      const { count } = await this.stores.sessions.revokeAll(tx, accountId, now);
      await appendEvent(tx, accountId, { type: 'session.revoked', resourceType: 'account', resourceId: accountId, data: { all: true, count } });
      return count;
    });
  }

  /** Unlocks password sign-in; true when a lock was lifted. */
  async unlock(auth: AuthContext): Promise<boolean> {
    return this.transactions.run(async (tx) => {
      const unlocked = await this.stores.accounts.unlock(tx, auth.accountId);
      if (unlocked) {
        await appendEvent(tx, auth.accountId, { type: 'account.updated', resourceType: 'account', resourceId: auth.accountId, data: { sign_in_unlocked: true } });
      }
      return unlocked;
    });
  }
}
