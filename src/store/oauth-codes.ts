import type { Transaction } from '../domain/transactions';
import type { OAuthCode } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';
import { clientFor } from './transactions';

export type { OAuthCode };

export interface NewOAuthCode {
  id: string;
  accountId: string;
  codeHash: string;
  clientId: string;
  redirectUri: string;
  codeChallenge: string;
  device: string | null;
  createdAt: Date;
  expiresAt: Date;
}

export class OAuthCodeStore {
  constructor(private readonly db: Db) {}

  create(code: NewOAuthCode): Promise<OAuthCode> {
    return this.db.oAuthCode.create({ data: code });
  }

  findByHash(codeHash: string): Promise<OAuthCode | null> {
    return this.db.oAuthCode.findUnique({ where: { codeHash } });
  }

  recordSession(id: string, sessionId: string): Promise<unknown> {
    return this.db.oAuthCode.update({ where: { id }, data: { sessionId } });
  }

  /** Marks the code used; false when someone else used it first (single use even under races). */
  async consume(tx: Transaction, id: string, now: Date): Promise<boolean> {
    const { count } = await clientFor(tx).oAuthCode.updateMany({ where: { id, usedAt: null }, data: { usedAt: now } });
    return count === 1;
  }
}
