// Raising an alert inside the caller's transaction, beside the change that caused it: one open
// alert per kind and resource (a repeat while it is open changes nothing; after it was
// acknowledged, a new occurrence raises a new one), an `alert.raised` event, and the e-mail
// outbox mark (sent later by the alert mailer, according to the account's preference).
import { newId } from '../domain/secrets';
import { appendEvent } from './events';
import type { Tx } from './prisma';

export interface RaiseAlert {
  kind: string;
  title: string;
  detail: string;
  resourceType?: string | null;
  resourceId?: string | null;
}

/** Returns the new alert's id, or null when the same alert is still open. */
export async function raiseAlert(tx: Tx, accountId: string, alert: RaiseAlert): Promise<string | null> {
  const open = await tx.alert.findFirst({
    where: { accountId, kind: alert.kind, resourceType: alert.resourceType ?? null, resourceId: alert.resourceId ?? null, acknowledgedAt: null },
    select: { id: true },
  });
  if (open) return null;
  const id = newId();
  await tx.alert.create({
    data: { id, accountId, kind: alert.kind, title: alert.title, detail: alert.detail, resourceType: alert.resourceType ?? null, resourceId: alert.resourceId ?? null, emailState: 'pending' },
  });
  await appendEvent(tx, accountId, { type: 'alert.raised', resourceType: 'alert', resourceId: id, data: { kind: alert.kind, title: alert.title } });
  return id;
}
