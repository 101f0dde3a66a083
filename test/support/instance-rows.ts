// Instance rows without a VM, for tests of what the service does with them (events, alerts, keys).
import { randomUUID } from 'node:crypto';
import type { Account } from '../../src/store/accounts';
import type { TestService } from './harness';

export const TEST_SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste';

/** An instance row (no VM), with the status given and any other fields. */
export async function insertInstance(t: TestService, account: Account, name: string, status = 'starting', extra: Record<string, unknown> = {}) {
  return t.services.database.prisma.instance.create({
    data: {
      id: randomUUID(),
      accountId: account.id,
      name,
      image: 'universal',
      imageProfile: 'minimal',
      artifactKey: 'test',
      status,
      desiredState: 'running',
      vcpu: 1,
      memoryMib: 512,
      diskMib: 4096,
      sshPublicKey: TEST_SSH_KEY,
      guestHostname: name,
      ...extra,
    },
  });
}
