// Sends plain-text e-mail through the SMTP relay the operator configured by URL
// (KISTE_SMTP_URL: smtp://user:pass@host:587 with STARTTLS when offered, smtps://…:465 for TLS from
// the start; nodemailer's URL options such as ?tls.rejectUnauthorized=false also work). The
// domain sees only the MailSender interface.
import { createTransport } from 'nodemailer';

export interface OutgoingMail {
  to: string;
  subject: string;
  text: string;
}

export interface MailSender {
  /** Resolves once the relay accepted the message; rejects with MailSendError. */
  send(mail: OutgoingMail): Promise<void>;
}

export class MailSendError extends Error {
  constructor(
    message: string,
    /** False when the relay refused the message for good (retrying the same message cannot help). */
    readonly transient: boolean,
  ) {
    super(message);
    this.name = 'MailSendError';
  }
}

export interface SmtpSettings {
  url: string;
  /** The From header, e.g. `kiste <kiste@example.com>`. */
  from: string;
  /** Bound on connecting, on the greeting and on a silent connection (default 15 s). */
  timeoutMs?: number;
}

export class SmtpMailSender implements MailSender {
  private readonly transport;

  constructor(private readonly settings: SmtpSettings) {
    const timeout = settings.timeoutMs ?? 15_000;
    this.transport = createTransport({
      url: settings.url,
      connectionTimeout: timeout,
      greetingTimeout: timeout,
      socketTimeout: timeout,
      disableFileAccess: true,
      disableUrlAccess: true,
    });
  }

  async send(mail: OutgoingMail): Promise<void> {
    try {
      await this.transport.sendMail({ from: this.settings.from, to: mail.to, subject: mail.subject, text: mail.text });
    } catch (error) {
      const failure = error as { message?: string; permanent?: boolean; code?: string; responseCode?: number };
      // A refusal of this message (5xx on MAIL FROM, RCPT TO, DATA) is final; a connection,
      // timeout, 4xx or credential problem may pass on a later attempt.
      const permanent = failure.permanent === true && failure.code !== 'EAUTH';
      throw new MailSendError(failure.message ?? String(error), !permanent);
    }
  }
}
