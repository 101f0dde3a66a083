// The alert e-mail outbox. raiseAlert marks every new alert `pending` in the transaction that
// raises it; this job decides each one: `skipped` when the account switched its kind off (or never
// switched it on and the kind is not e-mailed by default) or when no SMTP relay is configured,
// otherwise it is sent and becomes `sent` with emailed_at. A relay that cannot be reached or
// answers 4xx is tried again with growing pauses, MAX_EMAIL_ATTEMPTS times in all, then the e-mail
// is `failed`; a message the relay refuses for good (5xx) fails at once. The alert itself is never
// touched otherwise: mail trouble never loses or hides an alert.
//
// Several processes may run the job on one database: every attempt is claimed with a conditional
// update on the attempt count first (see AlertStore.claimEmail), so one of them sends it. A process
// that dies while sending leaves a claim that another takes over after STALE_CLAIM_MS (the e-mail
// may then arrive twice: at least once, never lost).
import { MailSendError, type MailSender, type OutgoingMail } from '../mail/mail-sender';
import type { AlertStore, OutboxAlert } from '../store/alerts';
import { alertKind, isAlertKind } from './alert-kinds';
import type { Clock } from './clock';

export const MAX_EMAIL_ATTEMPTS = 8;
/** Pause after the first failed attempt; it doubles with each further one up to 30 min (30 s, 1, 2, 4, 8, 16, 30 min: about an hour in all). */
export const EMAIL_RETRY_BASE_MS = 30_000;
const EMAIL_RETRY_MAX_MS = 30 * 60_000;
/** A claim older than this belongs to a process that died while sending. */
const STALE_CLAIM_MS = 10 * 60_000;
const BATCH = 100;

export interface OutboxRun {
  sent: number;
  skipped: number;
  /** Attempts that failed and will be tried again. */
  retrying: number;
  failed: number;
}

export interface OutboxLogger {
  warn(object: object, message: string): void;
}

export function emailRetryDelayMs(attemptsMade: number): number {
  return Math.min(EMAIL_RETRY_MAX_MS, EMAIL_RETRY_BASE_MS * 2 ** Math.max(0, attemptsMade - 1));
}

export class AlertOutbox {
  constructor(
    private readonly store: AlertStore,
    /** null: no relay is configured, nothing is e-mailed. */
    private readonly sender: MailSender | null,
    private readonly clock: Clock,
    private readonly settings: { baseUrl: string },
    private readonly logger: OutboxLogger,
  ) {}

  /** Background: decides and sends what is waiting. */
  async run(): Promise<OutboxRun> {
    const result: OutboxRun = { sent: 0, skipped: 0, retrying: 0, failed: 0 };
    const now = this.clock.now();
    const waiting = await this.store.outbox(new Date(now.getTime() - STALE_CLAIM_MS), BATCH);
    for (const alert of waiting) {
      if (alert.emailState === 'pending' && alert.emailAttempts > 0 && alert.emailedAt
        && now.getTime() < alert.emailedAt.getTime() + emailRetryDelayMs(alert.emailAttempts)) continue; // pausing after a failure
      if (!this.sender || alert.account.deletionRequestedAt || !(await this.wanted(alert))) {
        if (alert.emailState === 'pending' ? await this.store.skipEmail(alert) : await this.store.finishEmail(alert.id, alert.emailAttempts, 'skipped', null)) result.skipped++;
        continue;
      }
      if (alert.emailState === 'sending' && alert.emailAttempts >= MAX_EMAIL_ATTEMPTS) {
        await this.store.finishEmail(alert.id, alert.emailAttempts, 'failed', null); // the last attempt died with its process
        result.failed++;
        continue;
      }
      if (!(await this.store.claimEmail(alert, this.clock.now()))) continue; // another process has it
      const attempt = alert.emailAttempts + 1;
      try {
        await this.sender.send(alertMail(alert, this.settings.baseUrl));
        await this.store.finishEmail(alert.id, attempt, 'sent', this.clock.now());
        result.sent++;
      } catch (error) {
        const transient = !(error instanceof MailSendError) || error.transient;
        const message = error instanceof Error ? error.message : String(error);
        if (transient && attempt < MAX_EMAIL_ATTEMPTS) {
          await this.store.finishEmail(alert.id, attempt, 'pending', this.clock.now());
          result.retrying++;
          this.logger.warn({ alert: alert.id, attempt, error: message }, 'alert e-mail not sent; will try again');
          // The relay is unreachable or busy: the rest waits for the next run instead of each
          // paying the same timeout now (their attempts are not counted).
          break;
        }
        await this.store.finishEmail(alert.id, attempt, 'failed', null);
        result.failed++;
        this.logger.warn({ alert: alert.id, attempt, error: message }, 'alert e-mail failed for good');
      }
    }
    return result;
  }

  /** The account's choice for the kind, else the kind's default. */
  private async wanted(alert: OutboxAlert): Promise<boolean> {
    const chosen = await this.store.preference(alert.accountId, alert.kind);
    if (chosen !== null) return chosen;
    return isAlertKind(alert.kind) ? alertKind(alert.kind).emailByDefault : true;
  }
}

/** The e-mail of one alert: its title as the subject; the text says what happened and where to look. */
export function alertMail(alert: OutboxAlert, baseUrl: string): OutgoingMail {
  const definition = isAlertKind(alert.kind) ? alertKind(alert.kind) : null;
  const lines = [
    alert.title,
    '',
    alert.detail,
    '',
    `Alert: ${definition ? `${definition.title} (${alert.kind})` : alert.kind}${definition ? ` - ${definition.description}` : ''}`,
    ...(alert.resourceType && alert.resourceId ? [`Concerns: ${alert.resourceType} ${alert.resourceId}`] : []),
    `Raised: ${alert.createdAt.toISOString()}`,
    `Alert ID: ${alert.id}`,
    '',
    `Your alerts: GET ${baseUrl}/v1/alerts (acknowledge one with POST ${baseUrl}/v1/alerts/${alert.id}/acknowledge).`,
    `To stop e-mail of this kind: PATCH ${baseUrl}/v1/alerts/preferences with {"${alert.kind}": false}. Alerts stay listed either way.`,
    '',
    '-- kiste',
  ];
  return { to: alert.account.email, subject: `[kiste] ${alert.title}`, text: `${lines.join('\n')}\n` };
}
