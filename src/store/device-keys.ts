import type { Db, DeviceKey, Tx } from './prisma';

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

  count(accountId: string, tx: Tx | Db = this.db): Promise<number> {
    return tx.deviceKey.count({ where: { accountId } });
  }

  findByFingerprint(accountId: string, fingerprint: string): Promise<DeviceKey | null> {
    return this.db.deviceKey.findUnique({ where: { accountId_fingerprint: { accountId, fingerprint } } });
  }

  find(accountId: string, id: string): Promise<DeviceKey | null> {
    return this.db.deviceKey.findFirst({ where: { accountId, id } });
  }

  create(tx: Tx, key: NewDeviceKey): Promise<DeviceKey> {
    return tx.deviceKey.create({ data: key });
  }

  delete(tx: Tx, accountId: string, id: string): Promise<{ count: number }> {
    return tx.deviceKey.deleteMany({ where: { accountId, id } });
  }
}
