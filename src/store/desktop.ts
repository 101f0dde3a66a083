// Desktop links and the viewers' desktop sessions.
import type { DesktopLink, DesktopSession } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';

export type { DesktopLink, DesktopSession };

export class DesktopStore {
  constructor(private readonly db: Db) {}

  createLink(link: { id: string; accountId: string; instanceId: string; tokenHash: string; createdAt: Date; expiresAt: Date }): Promise<DesktopLink> {
    return this.db.desktopLink.create({ data: link });
  }

  /** The link with this reference hash, whatever its state (the caller checks account, expiry, revocation). */
  findLink(tokenHash: string): Promise<DesktopLink | null> {
    return this.db.desktopLink.findUnique({ where: { tokenHash } });
  }

  /** Revokes the instance's live links; the number revoked. */
  async revokeLinks(accountId: string, instanceId: string, now: Date): Promise<number> {
    const { count } = await this.db.desktopLink.updateMany({
      where: { accountId, instanceId, revokedAt: null, expiresAt: { gt: now } },
      data: { revokedAt: now },
    });
    return count;
  }

  createSession(session: { id: string; accountId: string; instanceId: string; linkId: string; credentialId: string; createdAt: Date; expiresAt: Date }): Promise<DesktopSession> {
    return this.db.desktopSession.create({ data: session });
  }

  /** A live session of the account. */
  findSession(accountId: string, id: string, now: Date): Promise<DesktopSession | null> {
    return this.db.desktopSession.findFirst({ where: { id, accountId, endedAt: null, expiresAt: { gt: now } } });
  }

  /** The newest live session this credential opened from this link (a reloaded viewer's). */
  findSessionOf(accountId: string, linkId: string, credentialId: string, now: Date): Promise<DesktopSession | null> {
    return this.db.desktopSession.findFirst({
      where: { accountId, linkId, credentialId, endedAt: null, expiresAt: { gt: now } },
      orderBy: { createdAt: 'desc' },
    });
  }

  async endSession(accountId: string, id: string, now: Date): Promise<boolean> {
    const { count } = await this.db.desktopSession.updateMany({ where: { id, accountId, endedAt: null }, data: { endedAt: now } });
    return count === 1;
  }

  async endAccountSessions(accountId: string, now: Date): Promise<number> {
    const { count } = await this.db.desktopSession.updateMany({ where: { accountId, endedAt: null }, data: { endedAt: now } });
    return count;
  }
}
