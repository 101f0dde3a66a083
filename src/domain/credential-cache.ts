// A short-lived in-process cache of presented credentials (by token hash), so a script calling
// the API in a loop costs no database read per request. Bounded in time and size. Whatever ends or
// changes a credential or an account drops that account's entries at once, in every process that
// shares the database (Credentials.forgetAccount); a read that began before such a drop is not
// cached, so it cannot put back what the drop removed. The time to live bounds what a lost
// announcement can cost.
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
  /** Counts drops; `droppedAt` holds, per account, the count at its latest drop. */
  private drops = 0;
  private readonly droppedAt = new Map<string, number>();
  /** The newest drop no longer in `droppedAt` (the map is bounded): a read older than it is not cached. */
  private forgottenDrop = 0;

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

  /** Where a database read starts: hand it to `set` with what the read found. */
  position(): number {
    return this.drops;
  }

  /** Caches what a read from `readFrom` found, unless the account's credentials were dropped since it began. */
  set(tokenHash: string, entry: Omit<CachedCredential, 'freshUntil'>, now: Date, readFrom: number): CachedCredential {
    const cached = { ...entry, freshUntil: now.getTime() + this.ttlMs };
    const lastDrop = Math.max(this.droppedAt.get(entry.auth.accountId) ?? 0, this.forgottenDrop);
    if (lastDrop > readFrom) return cached; // used for this request, not kept
    if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(tokenHash, cached);
    return cached;
  }

  /** Drops every entry; a read running now is not cached either. */
  forgetAll(): void {
    this.drops++;
    this.droppedAt.clear();
    this.forgottenDrop = this.drops;
    this.entries.clear();
  }

  forgetAccount(accountId: string): void {
    this.drops++;
    this.droppedAt.delete(accountId); // re-inserted: the map stays in order of the latest drop
    this.droppedAt.set(accountId, this.drops);
    if (this.droppedAt.size > MAX_ENTRIES) {
      const [oldest, at] = this.droppedAt.entries().next().value!;
      this.droppedAt.delete(oldest);
      this.forgottenDrop = at;
    }
    for (const [hash, entry] of this.entries) if (entry.auth.accountId === accountId) this.entries.delete(hash);
  }
}
