// Account deletion: the request ends sign-in at once (sessions and API keys revoked, account
// marked) and a durable job walks workers → billing → records → done, retrying with backoff and
// resuming after a restart, because every step is recorded before the next begins.
import { KisteError } from '../errors';
import type { AccountStore } from '../store/accounts';
import type { ApiTokenStore } from '../store/api-tokens';
import type { AccountDeletion, AccountDeletionStore } from '../store/deletions';
import { appendEvent } from '../store/events';
import type { SessionStore } from '../store/sessions';
import type { Clock } from './clock';
import { newId, verifyPassword } from './secrets';
import type { Transactions } from './transactions';
import type { ServiceCredentialStore } from '../store/service-credentials';

export type DeletionStep = 'workers' | 'billing' | 'records' | 'done';

/** What each step does; workers and billing grow with the machines and billing issues. */
export interface DeletionSteps {
  workers(accountId: string): Promise<void>;
  billing(accountId: string): Promise<void>;
}

export const NO_EXTERNAL_STEPS: DeletionSteps = { workers: async () => {}, billing: async () => {} };

const NEXT_STEP: Record<Exclude<DeletionStep, 'done'>, DeletionStep> = { workers: 'billing', billing: 'records', records: 'done' };

export class AccountDeletions {
  constructor(
    private readonly transactions: Transactions,
    private readonly stores: { accounts: AccountStore; sessions: SessionStore; apiTokens: ApiTokenStore; deletions: AccountDeletionStore; serviceCredentials: ServiceCredentialStore },
    private readonly steps: DeletionSteps,
    private readonly clock: Clock,
  ) {}

  async request(accountId: string, confirm: string, password: string): Promise<AccountDeletion> {
    const account = await this.stores.accounts.findById(accountId);
    if (!account) throw new KisteError('A02');
    if (account.deletionRequestedAt) throw new KisteError('A32');
    const emailMatches = confirm.trim().toLowerCase() === account.email;
    const passwordMatches = await verifyPassword(password, account.passwordHash);
    if (!emailMatches) throw new KisteError('A31', { message: 'confirm must be the account e-mail address', param: 'confirm' });
    if (!passwordMatches) throw new KisteError('A31', { message: 'The password is not correct', param: 'password' });
    const now = this.clock.now();
    return this.transactions.run(async (tx) => {
      await appendEvent(tx, accountId, { type: 'account.deletion_requested', resourceType: 'account', resourceId: accountId, data: {} });
      if (!(await this.stores.accounts.markDeletionRequested(tx, accountId, now))) throw new KisteError('A32');
      await this.stores.sessions.revokeAll(tx, accountId, now);
      await this.stores.apiTokens.revokeAll(tx, accountId, now);
      await this.stores.serviceCredentials.endForAccount(accountId, tx); // private services' cookies and tokens
      return this.stores.deletions.create(tx, { id: newId(), accountId, email: account.email, now });
    });
  }

  get(accountId: string): Promise<AccountDeletion | null> {
    return this.stores.deletions.findByAccount(accountId);
  }

  /** Runs every due deletion as far as it goes; returns how many advanced. */
  async runDue(): Promise<number> {
    let advanced = 0;
    for (const deletion of await this.stores.deletions.due(this.clock.now())) {
      if (await this.advance(deletion)) advanced++;
    }
    return advanced;
  }

  private async advance(deletion: AccountDeletion): Promise<boolean> {
    let current = deletion;
    try {
      while (current.step !== 'done') {
        const step = current.step as Exclude<DeletionStep, 'done'>;
        if (step === 'records') {
          current = await this.transactions.run(async (tx) => {
            await this.stores.accounts.delete(tx, current.accountId);
            return this.stores.deletions.update(current.id, { step: NEXT_STEP[step], lastError: null }, tx);
          });
        } else {
          await this.steps[step](current.accountId);
          current = await this.stores.deletions.update(current.id, { step: NEXT_STEP[step], lastError: null });
        }
      }
      await this.stores.deletions.update(current.id, { state: 'completed', completedAt: this.clock.now(), nextAttemptAt: null });
      return true;
    } catch (error) {
      const attempts = current.attempts + 1;
      const delayMs = Math.min(3600_000, 1000 * 2 ** Math.min(attempts, 12));
      await this.stores.deletions.update(current.id, {
        attempts,
        lastError: error instanceof Error ? error.message.slice(0, 500) : String(error).slice(0, 500),
        nextAttemptAt: new Date(this.clock.now().getTime() + delayMs),
      });
      return false;
    }
  }
}
