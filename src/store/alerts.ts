// Alerts and the per-account e-mail switches.
//
// raiseAlert is the one way to raise an alert: inside the caller's transaction, beside the change
// that caused it: one open alert per kind and resource (a repeat while it is open changes nothing;
// after it was acknowledged, a new occurrence raises a new one), an `alert.raised` event, and the
// e-mail outbox mark (emailState `pending`, sent later by the alert outbox according to the
// account's preference).
//
// The e-mail outbox lives in three columns: emailState (pending → sending → sent | skipped |
// failed; `sending` is a claim), emailAttempts (bumped by every claim, so a claim is a
// compare-and-set on it and two processes never send the same attempt) and emailedAt, which is the
// time of the last outbox step until the e-mail is sent (claim time while `sending`, last failure
// while `pending` again), and the time it was sent once `sent`. Only a `sent` row's emailedAt is
// shown as `emailed_at`.
import type { AlertKind } from '../domain/alert-kinds';
import type { Transaction } from '../domain/transactions';
import { newId } from '../domain/secrets';
import { appendEvent } from './events';
import type { Alert } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';
import { clientFor } from './transactions';

export type { Alert };

export type EmailState = 'pending' | 'sending' | 'sent' | 'skipped' | 'failed';

export interface RaiseAlert {
  kind: AlertKind;
  title: string;
  detail: string;
  resourceType?: string | null;
  resourceId?: string | null;
  /**
   * Raise only when this kind was never raised for this resource, acknowledged ones included
   * (a one-time condition such as a key about to expire).
   */
  once?: boolean;
}

const TITLE_MAX = 200;
const DETAIL_MAX = 2000;

/** Returns the new alert's id, or null when the same alert is still open (or, with `once`, was ever raised). */
export async function raiseAlert(tx: Transaction, accountId: string, alert: RaiseAlert): Promise<string | null> {
  const client = clientFor(tx);
  const resourceType = alert.resourceType ?? null;
  const resourceId = alert.resourceId ?? null;
  // The account row first (a row lock on PostgreSQL, the write lock on SQLite): two processes
  // raising the same alert at once are serialised, so the check below holds until commit.
  await client.account.update({ where: { id: accountId }, data: { updatedAt: new Date() } });
  const existing = await client.alert.findFirst({
    where: { accountId, kind: alert.kind, resourceType, resourceId, ...(alert.once ? {} : { acknowledgedAt: null }) },
    select: { id: true },
  });
  if (existing) return null;
  const id = newId();
  const title = clip(alert.title, TITLE_MAX);
  await client.alert.create({
    data: { id, accountId, kind: alert.kind, title, detail: clip(alert.detail, DETAIL_MAX), resourceType, resourceId, emailState: 'pending' },
  });
  await appendEvent(tx, accountId, {
    type: 'alert.raised',
    resourceType: 'alert',
    resourceId: id,
    data: { kind: alert.kind, title, resource_type: resourceType, resource_id: resourceId },
  });
  return id;
}

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

/** Every row, with the account's address (what the outbox needs to send). */
export type OutboxAlert = Alert & { account: { email: string; deletionRequestedAt: Date | null } };

export class AlertStore {
  constructor(private readonly db: Db) {}

  /** Open alerts first, each part newest first; at most `limit` in all. */
  async list(accountId: string, limit: number): Promise<Alert[]> {
    const order = [{ createdAt: 'desc' as const }, { id: 'desc' as const }];
    const open = await this.db.alert.findMany({ where: { accountId, acknowledgedAt: null }, orderBy: order, take: limit });
    if (open.length >= limit) return open;
    const closed = await this.db.alert.findMany({ where: { accountId, acknowledgedAt: { not: null } }, orderBy: order, take: limit - open.length });
    return [...open, ...closed];
  }

  find(accountId: string, id: string, tx?: Transaction): Promise<Alert | null> {
    return clientFor(tx, this.db).alert.findFirst({ where: { accountId, id } });
  }

  /** Closes an open alert; false when it was already closed (or is not there). */
  async acknowledge(tx: Transaction, accountId: string, id: string, at: Date): Promise<boolean> {
    const { count } = await clientFor(tx).alert.updateMany({ where: { accountId, id, acknowledgedAt: null }, data: { acknowledgedAt: at } });
    return count === 1;
  }

  /** The newest alert of a kind about one resource (acknowledged or not). */
  latest(accountId: string, kind: AlertKind, resourceType: string, resourceId: string): Promise<Alert | null> {
    return this.db.alert.findFirst({ where: { accountId, kind, resourceType, resourceId }, orderBy: [{ createdAt: 'desc' }, { id: 'desc' }] });
  }

  /** The account's own e-mail switches (kinds it never changed are absent). */
  async preferences(accountId: string): Promise<Map<string, boolean>> {
    const rows = await this.db.alertPreference.findMany({ where: { accountId } });
    return new Map(rows.map((row) => [row.kind, row.enabled]));
  }

  async preference(accountId: string, kind: string): Promise<boolean | null> {
    const row = await this.db.alertPreference.findUnique({ where: { accountId_kind: { accountId, kind } }, select: { enabled: true } });
    return row?.enabled ?? null;
  }

  setPreference(tx: Transaction, accountId: string, kind: string, enabled: boolean): Promise<unknown> {
    return clientFor(tx).alertPreference.upsert({
      where: { accountId_kind: { accountId, kind } },
      create: { accountId, kind, enabled },
      update: { enabled },
    });
  }

  // ---- e-mail outbox (host-wide: the background job serves every account) ----

  /** Host-wide: alerts waiting for e-mail, and claims of `sending` older than `staleBefore` (a process died while sending). Oldest first. */
  outbox(staleBefore: Date, limit: number): Promise<OutboxAlert[]> {
    return this.db.alert.findMany({
      where: { OR: [{ emailState: 'pending' }, { emailState: 'sending', emailedAt: { lt: staleBefore } }] },
      include: { account: { select: { email: true, deletionRequestedAt: true } } },
      orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
      take: limit,
    });
  }

  /**
   * Claims the next e-mail attempt of an alert as seen (state and attempt count unchanged since):
   * true for exactly one caller, whatever the number of processes.
   */
  async claimEmail(alert: Alert, at: Date): Promise<boolean> {
    const { count } = await this.db.alert.updateMany({
      where: { id: alert.id, emailState: alert.emailState, emailAttempts: alert.emailAttempts },
      data: { emailState: 'sending', emailAttempts: { increment: 1 }, emailedAt: at },
    });
    return count === 1;
  }

  /** Decides a pending alert without sending (switched off, no relay): only when it is still pending as seen. */
  async skipEmail(alert: Alert): Promise<boolean> {
    const { count } = await this.db.alert.updateMany({
      where: { id: alert.id, emailState: alert.emailState, emailAttempts: alert.emailAttempts },
      data: { emailState: 'skipped', emailedAt: null },
    });
    return count === 1;
  }

  /** Ends a claimed attempt (`attempt` is the attempt count the claim set); false when the claim was no longer this one. */
  async finishEmail(id: string, attempt: number, state: Exclude<EmailState, 'sending'>, at: Date | null): Promise<boolean> {
    const { count } = await this.db.alert.updateMany({ where: { id, emailState: 'sending', emailAttempts: attempt }, data: { emailState: state, emailedAt: at } });
    return count === 1;
  }
}
