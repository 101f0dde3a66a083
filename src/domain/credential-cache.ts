// A short-lived in-process cache of presented credentials (by token hash), so a script calling
// the API in a loop costs no database read per request. Bounded in time and size. Whatever ends or
// changes a credential or an account in this process drops that account's entries at once
// (Credentials.forgetAccount); other processes sharing a PostgreSQL database see the change within
// the time to live.
import type { AuthContext } from './auth-context';

export const CREDENTIAL_CACHE_TTL_MS = 1_000;
const MAX_ENTRIES = 10_000;

export interface CachedCredential {
  auth: AuthContext;
  /** When the credential itself expires. */
  expiresAt: Date;
  lastUsedAt: Date | null;
  /** Epoch milliseconds after which the entry is read from the database again. */
  freshUntil: number;
}

export class CredentialCache {
  private readonly entries = new Map<string, CachedCredential>();

  constructor(private readonly ttlMs = CREDENTIAL_CACHE_TTL_MS) {}

  get(tokenHash: string, now: Date): CachedCredential | undefined {
    const entry = this.entries.get(tokenHash);
    if (!entry) return undefined;
    if (entry.freshUntil <= now.getTime() || entry.expiresAt <= now) {
      this.entries.delete(tokenHash);
      return undefined;
    }
    return entry;
  }

  set(tokenHash: string, entry: Omit<CachedCredential, 'freshUntil'>, now: Date): CachedCredential {
    if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value!);
    const cached = { ...entry, freshUntil: now.getTime() + this.ttlMs };
    this.entries.set(tokenHash, cached);
    return cached;
  }

  forgetAccount(accountId: string): void {
    for (const [hash, entry] of this.entries) if (entry.auth.accountId === accountId) this.entries.delete(hash);
  }
}
