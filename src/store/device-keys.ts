import type { Transaction } from '../domain/transactions';
import type { DeviceKey } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';
import { clientFor } from './transactions';

export type { DeviceKey };

export interface NewDeviceKey {
  id: string;
  accountId: string;
  name: string;
  publicKey: string;
  fingerprint: string;
  createdAt: Date;
}

export class DeviceKeyStore {
  constructor(private readonly db: Db) {}

  list(accountId: string): Promise<DeviceKey[]> {
    return this.db.deviceKey.findMany({ where: { accountId }, orderBy: [{ createdAt: 'desc' }, { id: 'desc' }] });
  }

  count(accountId: string, tx?: Transaction): Promise<number> {
    return clientFor(tx, this.db).deviceKey.count({ where: { accountId } });
  }

  findByFingerprint(accountId: string, fingerprint: string): Promise<DeviceKey | null> {
    return this.db.deviceKey.findUnique({ where: { accountId_fingerprint: { accountId, fingerprint } } });
  }

  find(accountId: string, id: string): Promise<DeviceKey | null> {
    return this.db.deviceKey.findFirst({ where: { accountId, id } });
  }

  create(tx: Transaction, key: NewDeviceKey): Promise<DeviceKey> {
    return clientFor(tx).deviceKey.create({ data: key });
  }

  delete(tx: Transaction, accountId: string, id: string): Promise<{ count: number }> {
    return clientFor(tx).deviceKey.deleteMany({ where: { accountId, id } });
  }
}
