// The credential cache never keeps what a read found when the account's credentials were dropped
// while that read was running (a revocation announced meanwhile must not be undone by it).
import type { AuthContext } from '../../src/domain/auth-context';
import { CredentialChanges } from '../../src/db/credential-changes';
import { CredentialCache } from '../../src/domain/credential-cache';

const now = new Date('2026-11-27T12:00:00Z');
const entry = (accountId: string) => ({
  auth: { accountId, kind: 'api_key', credentialId: `key-of-${accountId}` } as unknown as AuthContext,
  expiresAt: new Date(now.getTime() + 3_600_000),
  lastUsedAt: null,
});

describe('credential cache', () => {
  it('keeps a read that no drop of its account overtook, until its time to live', () => {
    const cache = new CredentialCache(1_000);
    cache.forgetAccount('acc_a'); // before the read: it does not matter
    const readFrom = cache.position();
    cache.set('hash-a', entry('acc_a'), now, readFrom);
    expect(cache.get('hash-a', now)?.auth.accountId).toBe('acc_a');
    expect(cache.get('hash-a', new Date(now.getTime() + 1_000))).toBeUndefined();
  });

  it('does not keep a read that a drop of its account overtook; a drop of another account does not matter', () => {
    const cache = new CredentialCache(60_000);
    const readA = cache.position();
    const readB = cache.position();
    cache.forgetAccount('acc_a'); // announced while both reads ran
    expect(cache.set('hash-a', entry('acc_a'), now, readA).auth.accountId).toBe('acc_a'); // answered, not kept
    cache.set('hash-b', entry('acc_b'), now, readB);
    expect(cache.get('hash-a', now)).toBeUndefined();
    expect(cache.get('hash-b', now)?.auth.accountId).toBe('acc_b');
  });

  it('drops every cached credential of the account', () => {
    const cache = new CredentialCache(60_000);
    const readFrom = cache.position();
    cache.set('key', entry('acc_a'), now, readFrom);
    cache.set('other', entry('acc_b'), now, readFrom);
    cache.forgetAccount('acc_a');
    expect(cache.get('key', now)).toBeUndefined();
    expect(cache.get('other', now)).toBeDefined();
  });
});

describe('credential change announcements', () => {
  it('deliver account ids only (anyone who may connect may NOTIFY), and "every account" after a gap', async () => {
    const heard: (string | null)[] = [];
    const sent: string[] = [];
    const changes = new CredentialChanges(async (accountId) => void sent.push(accountId));
    changes.subscribe((accountId) => heard.push(accountId));
    const id = '0f8fad5b-d9cb-469f-a165-70867728950e';
    await changes.publish(id);
    expect(sent).toEqual([id]); // to the other processes
    changes.deliver('not an id; DROP TABLE');
    changes.deliver('x'.repeat(8000));
    changes.deliverEveryAccount();
    expect(heard).toEqual([id, null]);
  });

  it('"every account" empties the cache, and a read running then is not kept', () => {
    const cache = new CredentialCache(60_000);
    cache.set('before', entry('acc_a'), now, cache.position());
    const running = cache.position();
    cache.forgetAll();
    cache.set('during', entry('acc_b'), now, running);
    expect(cache.get('before', now)).toBeUndefined();
    expect(cache.get('during', now)).toBeUndefined();
    cache.set('after', entry('acc_b'), now, cache.position());
    expect(cache.get('after', now)).toBeDefined();
  });
});
