// Accounts: creation (bootstrap, admin command, optional open sign-up), the user, logout of the
// credential used, and the account export.
import { KisteError } from '../errors';
import type { Account, AccountStore } from '../store/accounts';
import type { ApiTokenStore } from '../store/api-tokens';
import type { DeviceKeyStore } from '../store/device-keys';
import { appendEvent } from '../store/events';
import type { ExportLinkStore } from '../store/exports';
import type { SessionStore } from '../store/sessions';
import type { AuthContext } from './auth-context';
import type { Clock } from './clock';
import { hashPassword, newId, newToken, sha256Hex, TOKEN_PREFIX } from './secrets';
import type { Transactions } from './transactions';

const EXPORT_LINK_MS = 10 * 60_000;
export const MIN_PASSWORD_LENGTH = 10;

export class Accounts {
  constructor(
    private readonly transactions: Transactions,
    private readonly stores: {
      accounts: AccountStore;
      sessions: SessionStore;
      apiTokens: ApiTokenStore;
      deviceKeys: DeviceKeyStore;
      exportLinks: ExportLinkStore;
    },
    private readonly clock: Clock,
  ) {}

  async create(email: string, password: string, name: string | null = null): Promise<Account> {
    const normalised = email.trim().toLowerCase();
    if (!/^[^\s@]+@[^\s@]+$/.test(normalised)) throw new KisteError('P01', { message: `Not an e-mail address: ${email}`, param: 'email' });
    if (password.length < MIN_PASSWORD_LENGTH) {
      throw new KisteError('P01', { message: `Password must have at least ${MIN_PASSWORD_LENGTH} characters`, param: 'password' });
    }
    if (await this.stores.accounts.findByEmail(normalised)) throw new KisteError('A08', { param: 'email' });
    const passwordHash = await hashPassword(password);
    return this.transactions.run(async (tx) => {
      const account = await this.stores.accounts.create(tx, { id: newId(), email: normalised, name, passwordHash });
      await appendEvent(tx, account.id, { type: 'account.updated', resourceType: 'account', resourceId: account.id, data: { created: true } });
      return account;
    });
  }

  /** Creates the first account from the environment when none exists; false when nothing was done. */
  async bootstrap(email: string | undefined, password: string | undefined): Promise<Account | null> {
    if (!email || !password || (await this.stores.accounts.count()) > 0) return null;
    return this.create(email, password);
  }

  async get(accountId: string): Promise<Account> {
    const account = await this.stores.accounts.findById(accountId);
    if (!account) throw new KisteError('A02');
    return account;
  }

  findByEmail(email: string): Promise<Account | null> {
    return this.stores.accounts.findByEmail(email.trim().toLowerCase());
  }

  /** Revokes the credential used for this request. */
  async logout(auth: AuthContext): Promise<void> {
    const now = this.clock.now();
    await this.transactions.run(async (tx) => {
      if (auth.kind === 'api_key') {
        await this.stores.apiTokens.revoke(tx, auth.accountId, auth.credentialId, now);
        await appendEvent(tx, auth.accountId, { type: 'api_token.revoked', resourceType: 'api_token', resourceId: auth.credentialId, data: { logout: true } });
      } else {
        await this.stores.sessions.revoke(tx, auth.accountId, auth.credentialId, now);
        await appendEvent(tx, auth.accountId, { type: 'session.revoked', resourceType: 'session', resourceId: auth.credentialId, data: { logout: true } });
      }
    });
  }

  async createExportLink(accountId: string): Promise<{ token: string; expiresAt: Date }> {
    const token = newToken(TOKEN_PREFIX.exportToken);
    const createdAt = this.clock.now();
    const expiresAt = new Date(createdAt.getTime() + EXPORT_LINK_MS);
    await this.stores.exportLinks.create({ id: newId(), accountId, tokenHash: sha256Hex(token), createdAt, expiresAt });
    return { token, expiresAt };
  }

  /** The account's data, for a link of the same account that has not expired. */
  async exportData(accountId: string, token: string): Promise<AccountExport> {
    const link = await this.stores.exportLinks.findByHash(accountId, sha256Hex(token));
    if (!link) throw new KisteError('A40', { param: 'token' });
    if (link.expiresAt <= this.clock.now()) throw new KisteError('A41', { param: 'token' });
    const [account, sessions, apiTokens, deviceKeys] = await Promise.all([
      this.get(accountId),
      this.stores.sessions.listActive(accountId, this.clock.now()),
      this.stores.apiTokens.list(accountId),
      this.stores.deviceKeys.list(accountId),
    ]);
    return { generatedAt: this.clock.now(), account, sessions, apiTokens, deviceKeys };
  }
}

export interface AccountExport {
  generatedAt: Date;
  account: Account;
  sessions: Awaited<ReturnType<SessionStore['listActive']>>;
  apiTokens: Awaited<ReturnType<ApiTokenStore['list']>>;
  deviceKeys: Awaited<ReturnType<DeviceKeyStore['list']>>;
}
