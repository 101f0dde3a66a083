// Alerts as the account sees them: the list (open ones first), acknowledging, and the per-kind
// e-mail switches. E-mail settings only decide what is e-mailed: every alert is listed and is an
// event, whatever they say. Raising happens beside the cause (store/alerts.raiseAlert); the
// periodic checks and the e-mail outbox are `checks` and `outbox`.
import { KisteError } from '../errors';
import type { AccountStore } from '../store/accounts';
import type { Alert, AlertStore } from '../store/alerts';
import { appendEvent } from '../store/events';
import { ALERT_KINDS, AlertKind, isAlertKind } from './alert-kinds';
import type { AlertChecks } from './alert-checks';
import type { AlertOutbox } from './alert-outbox';
import type { Clock } from './clock';
import type { Transactions } from './transactions';

/** At most this many alerts are listed: every open one first, then the newest acknowledged ones. */
export const ALERTS_LISTED = 200;

export interface AlertPreferences {
  /** Where alert e-mail goes: the account's address. */
  email: string;
  /** Whether this installation has an SMTP relay. */
  emailDelivery: 'configured' | 'unconfigured';
  kinds: { kind: AlertKind; title: string; description: string; enabled: boolean }[];
}

export class Alerts {
  constructor(
    private readonly transactions: Transactions,
    private readonly store: AlertStore,
    private readonly accounts: AccountStore,
    private readonly clock: Clock,
    private readonly mailConfigured: boolean,
    readonly outbox: AlertOutbox,
    readonly checks: AlertChecks,
  ) {}

  list(accountId: string): Promise<Alert[]> {
    return this.store.list(accountId, ALERTS_LISTED);
  }

  /** Closes the alert (idempotent: an acknowledged one is answered as it is). */
  async acknowledge(accountId: string, id: string): Promise<Alert> {
    const now = this.clock.now();
    return this.transactions.run(async (tx) => {
      const alert = await this.store.find(accountId, id, tx);
      if (!alert) throw new KisteError('N20');
      if (await this.store.acknowledge(tx, accountId, id, now)) {
        await appendEvent(tx, accountId, { type: 'alert.acknowledged', resourceType: 'alert', resourceId: id, data: { kind: alert.kind } });
        return { ...alert, acknowledgedAt: now };
      }
      return (await this.store.find(accountId, id, tx)) ?? alert;
    });
  }

  async preferences(accountId: string): Promise<AlertPreferences> {
    const account = await this.accounts.findById(accountId);
    if (!account) throw new KisteError('A01');
    const chosen = await this.store.preferences(accountId);
    return {
      email: account.email,
      emailDelivery: this.mailConfigured ? 'configured' : 'unconfigured',
      kinds: ALERT_KINDS.map((definition) => ({
        kind: definition.kind,
        title: definition.title,
        description: definition.description,
        enabled: chosen.get(definition.kind) ?? definition.emailByDefault,
      })),
    };
  }

  /** Switches e-mail per kind; an unknown kind is refused (N21) before anything changes. */
  async updatePreferences(accountId: string, changes: Record<string, boolean>): Promise<AlertPreferences> {
    for (const kind of Object.keys(changes)) {
      if (!isAlertKind(kind)) throw new KisteError('N21', { message: `Unknown alert kind ${JSON.stringify(kind.slice(0, 64))}`, param: kind });
    }
    const current = await this.preferences(accountId);
    const changed = Object.fromEntries(
      Object.entries(changes).filter(([kind, enabled]) => current.kinds.find((entry) => entry.kind === kind)!.enabled !== enabled),
    );
    if (Object.keys(changes).length > 0) {
      await this.transactions.run(async (tx) => {
        // Every kind named is stored, so a choice outlives a change of the kind's default.
        for (const [kind, enabled] of Object.entries(changes)) await this.store.setPreference(tx, accountId, kind, enabled);
        if (Object.keys(changed).length > 0) {
          await appendEvent(tx, accountId, { type: 'account.updated', resourceType: 'account', resourceId: accountId, data: { alert_email: changed } });
        }
      });
    }
    return this.preferences(accountId);
  }
}
