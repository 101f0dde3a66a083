// SSH public keys that every instance of the account accepts.
import { KisteError } from '../errors';
import type { AccountStore } from '../store/accounts';
import type { DeviceKey, DeviceKeyStore } from '../store/device-keys';
import { appendEvent } from '../store/events';
import type { Clock } from './clock';
import type { Limits } from './limits';
import { newId } from './secrets';
import { parsePublicKey, PublicKeyError } from './ssh-public-key';
import type { Transactions } from './transactions';

export class DeviceKeys {
  constructor(
    private readonly transactions: Transactions,
    private readonly store: DeviceKeyStore,
    private readonly accounts: AccountStore,
    private readonly limits: Limits,
    private readonly clock: Clock,
  ) {}

  list(accountId: string): Promise<DeviceKey[]> {
    return this.store.list(accountId);
  }

  async add(accountId: string, name: string, publicKey: string): Promise<DeviceKey> {
    let parsed;
    try {
      parsed = parsePublicKey(publicKey);
    } catch (error) {
      if (error instanceof PublicKeyError) throw new KisteError('A12', { message: `Invalid SSH public key: ${error.message}`, param: 'public_key' });
      throw error;
    }
    if (await this.store.findByFingerprint(accountId, parsed.fingerprint)) {
      throw new KisteError('A14', { param: 'public_key' });
    }
    try {
      return await this.transactions.run(async (tx) => {
        await this.accounts.lockForUpdate(tx, accountId); // two concurrent adds cannot both pass the limit
        if ((await this.store.count(accountId, tx)) >= this.limits.deviceKeys) {
          throw new KisteError('L09', { message: `An account can have at most ${this.limits.deviceKeys} device keys` });
        }
        const created = await this.store.create(tx, { id: newId(), accountId, name, publicKey: parsed.line, fingerprint: parsed.fingerprint, createdAt: this.clock.now() });
        await appendEvent(tx, accountId, {
          type: 'device_key.added', resourceType: 'device_key', resourceId: created.id, data: { name, fingerprint: parsed.fingerprint },
        });
        return created;
      });
    } catch (error) {
      // A concurrent add of the same key won the race: the unique (accountId, fingerprint) index says so.
      if ((error as { code?: unknown }).code === 'P2002') throw new KisteError('A14', { param: 'public_key' });
      throw error;
    }
  }

  async delete(accountId: string, id: string): Promise<void> {
    const deleted = await this.transactions.run(async (tx) => {
      const { count } = await this.store.delete(tx, accountId, id);
      if (count === 1) await appendEvent(tx, accountId, { type: 'device_key.deleted', resourceType: 'device_key', resourceId: id, data: {} });
      return count === 1;
    });
    if (!deleted) throw new KisteError('A13');
  }
}
