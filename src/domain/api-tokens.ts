// API keys for scripts: prefix + random secret, returned once, stored as a hash, at most
// `limits.apiTokens` live at a time, lifetime fixed at creation.
import { KisteError } from '../errors';
import type { AccountStore } from '../store/accounts';
import type { ApiToken, ApiTokenStore } from '../store/api-tokens';
import { appendEvent } from '../store/events';
import type { Clock } from './clock';
import type { Limits } from './limits';
import { newId, newToken, sha256Hex, TOKEN_PREFIX, tokenHint } from './secrets';
import type { Transactions } from './transactions';

export class ApiTokens {
  constructor(
    private readonly transactions: Transactions,
    private readonly store: ApiTokenStore,
    private readonly accounts: AccountStore,
    private readonly limits: Limits,
    private readonly clock: Clock,
  ) {}

  async create(accountId: string, label: string, lifetimeSeconds: number): Promise<{ token: string; record: ApiToken }> {
    const now = this.clock.now();
    const token = newToken(TOKEN_PREFIX.apiKey);
    const record = await this.transactions.run(async (tx) => {
      await this.accounts.lockForUpdate(tx, accountId); // two concurrent creates cannot both pass the limit
      if ((await this.store.countActive(accountId, now, tx)) >= this.limits.apiTokens) {
        throw new KisteError('L05', { message: `An account can have at most ${this.limits.apiTokens} active API keys` });
      }
      const created = await this.store.create(tx, {
        id: newId(),
        accountId,
        label,
        tokenHash: sha256Hex(token),
        tokenHint: tokenHint(token, TOKEN_PREFIX.apiKey),
        createdAt: now,
        expiresAt: new Date(now.getTime() + lifetimeSeconds * 1000),
      });
      await appendEvent(tx, accountId, { type: 'api_token.created', resourceType: 'api_token', resourceId: created.id, data: { label } });
      return created;
    });
    return { token, record };
  }

  list(accountId: string): Promise<ApiToken[]> {
    return this.store.list(accountId);
  }

  async get(accountId: string, id: string): Promise<ApiToken> {
    const found = await this.store.find(accountId, id);
    if (!found) throw new KisteError('A10');
    return found;
  }

  /** Revokes at once; revoking an already revoked key answers the same (idempotent). */
  async revoke(accountId: string, id: string): Promise<void> {
    await this.get(accountId, id);
    const now = this.clock.now();
    await this.transactions.run(async (tx) => {
      const { count } = await this.store.revoke(tx, accountId, id, now);
      if (count === 1) await appendEvent(tx, accountId, { type: 'api_token.revoked', resourceType: 'api_token', resourceId: id, data: {} });
    });
  }
}
