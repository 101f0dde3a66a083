// Hosted services (published ports) and their machines. Every query about a service names the
// account it belongs to; the proxy's lookup by key is the one exception (the key is the address).
import type { Transaction } from '../domain/transactions';
import type { HostedService, Instance } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';
import { clientFor } from './transactions';

export type { HostedService };

export interface NewHostedService {
  id: string;
  accountId: string;
  instanceId: string;
  name: string;
  port: number;
  description: string;
  key: string;
  access: 'account' | 'public';
  wakeOnRequest: boolean;
  idleStopMinutes: number | null;
  createdAt: Date;
}

/** What an update may change. */
export interface HostedServiceChanges {
  access?: 'account' | 'public';
  description?: string;
  wakeOnRequest?: boolean;
  idleStopMinutes?: number | null;
}

export class HostedServiceStore {
  constructor(private readonly db: Db) {}

  /** The machine's services, oldest first. */
  list(accountId: string, instanceId: string): Promise<HostedService[]> {
    return this.db.hostedService.findMany({ where: { accountId, instanceId }, orderBy: [{ createdAt: 'asc' }, { id: 'asc' }] });
  }

  find(accountId: string, instanceId: string, name: string): Promise<HostedService | null> {
    return this.db.hostedService.findFirst({ where: { accountId, instanceId, name } });
  }

  /** The account's service by id, with its machine. */
  findById(accountId: string, id: string): Promise<(HostedService & { instance: Instance }) | null> {
    return this.db.hostedService.findFirst({ where: { accountId, id }, include: { instance: true } });
  }

  /** The service a request's address names, with its machine (the proxy). */
  findByKey(key: string): Promise<(HostedService & { instance: Instance }) | null> {
    return this.db.hostedService.findUnique({ where: { key }, include: { instance: true } });
  }

  /** Adds bytes carried for services (the proxy's counts, flushed every minute); each was in use at `now`. */
  async addBytes(counts: ReadonlyMap<string, { in: number; out: number }>, now: Date): Promise<void> {
    for (const [id, count] of counts) {
      await this.db.hostedService.updateMany({ where: { id }, data: { bytesIn: { increment: count.in }, bytesOut: { increment: count.out }, lastRequestAt: now } });
    }
  }

  update(tx: Transaction, accountId: string, id: string, changes: HostedServiceChanges, now: Date): Promise<{ count: number }> {
    return clientFor(tx).hostedService.updateMany({ where: { accountId, id }, data: { ...changes, updatedAt: now } });
  }

  /** Records a status seen; true for the one caller that changed it from `was` (its event is then due). */
  async noteStatus(tx: Transaction, id: string, was: string | null, status: string): Promise<boolean> {
    const { count } = await clientFor(tx).hostedService.updateMany({ where: { id, lastStatus: was }, data: { lastStatus: status } });
    return count === 1;
  }

  /** The services of these machines count as in use at `now` (sessions of other kinds are open to them). */
  async markMachinesInUse(instanceIds: string[], now: Date): Promise<void> {
    await this.db.hostedService.updateMany({ where: { instanceId: { in: instanceIds } }, data: { lastRequestAt: now } });
  }

  /** Running machines with a service that stops them when idle (its own idle time, or it wakes them): their services' settings and last use. */
  idleCandidates(): Promise<(HostedService & { instance: Instance })[]> {
    return this.db.hostedService.findMany({
      where: { instance: { status: 'running', operation: null }, OR: [{ idleStopMinutes: { not: null } }, { wakeOnRequest: true }] },
      include: { instance: true },
    });
  }

  /** Whether a command runs in the machine now (an exec is use, whoever started it). */
  async commandRunning(instanceId: string): Promise<boolean> {
    return (await this.db.command.count({ where: { instanceId, status: 'running' } })) > 0;
  }

  /** Every service of the machine (any account check done by the caller: the machine is the account's). */
  ofMachine(instanceId: string): Promise<HostedService[]> {
    return this.db.hostedService.findMany({ where: { instanceId }, orderBy: [{ createdAt: 'asc' }, { id: 'asc' }] });
  }

  /** Whether the machine has a service of that name or on that port. */
  async taken(instanceId: string, name: string, port: number, tx: Transaction): Promise<boolean> {
    return (await clientFor(tx).hostedService.count({ where: { instanceId, OR: [{ name }, { port }] } })) > 0;
  }

  count(instanceId: string, tx: Transaction): Promise<number> {
    return clientFor(tx).hostedService.count({ where: { instanceId } });
  }

  create(tx: Transaction, service: NewHostedService): Promise<HostedService> {
    return clientFor(tx).hostedService.create({ data: { ...service, updatedAt: service.createdAt } });
  }

  delete(tx: Transaction, accountId: string, id: string): Promise<{ count: number }> {
    return clientFor(tx).hostedService.deleteMany({ where: { accountId, id } });
  }
}
