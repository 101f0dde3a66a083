// Hosted services (published ports, docs/hosted-services.md): a machine's port at a URL of its own.
// The rules live here: names and ports unique per machine, at most Limits.servicesPerMachine, a
// random key fixed at creation, the URL from the configured addresses (S12 when there are none),
// and the status as it is now (the machine's state, then whether the port answers).
import { randomInt } from 'node:crypto';
import { KisteError } from '../errors';
import type { AccountStore } from '../store/accounts';
import { appendEvent } from '../store/events';
import type { HostedService, HostedServiceStore } from '../store/hosted-services';
import type { Instance } from '../store/instances';
import type { Clock } from './clock';
import type { Limits } from './limits';
import { newId } from './secrets';
import { publishedAt, SERVICE_KEY_ALPHABET, SERVICE_KEY_LENGTH, type PublishedAt, type ServiceAddresses } from './service-addresses';
import type { Transaction, Transactions } from './transactions';

export type ServiceAccess = 'account' | 'public';
export type ServiceStatus = 'active' | 'unreachable' | 'stopped';

/** Whether something listens on a port of a running machine (a TCP open through its agent). */
export interface ServicePorts {
  answers(instanceId: string, port: number): Promise<boolean>;
}

/** What the domain needs of the machines: the owner's machine by name (K01 otherwise). */
export interface ServiceMachines {
  get(accountId: string, name: string): Promise<Instance>;
}

export interface NewService {
  name: string;
  port: number;
  description?: string;
  access?: ServiceAccess;
}

/** A service as the API shows it. */
export interface ServiceView extends PublishedAt {
  service: HostedService;
  instance: Instance;
  status: ServiceStatus;
}

export class HostedServices {
  constructor(
    private readonly transactions: Transactions,
    private readonly store: HostedServiceStore,
    private readonly accounts: AccountStore,
    private readonly machines: ServiceMachines,
    private readonly ports: ServicePorts,
    private readonly addresses: ServiceAddresses | null,
    private readonly limits: Limits,
    private readonly clock: Clock,
  ) {}

  async create(accountId: string, machineName: string, request: NewService): Promise<ServiceView> {
    const addresses = this.published();
    const instance = await this.machines.get(accountId, machineName);
    const created = await this.transactions.run(async (tx) => {
      // Two creates at once cannot both pass the limit or take one name.
      await this.accounts.lockForUpdate(tx, accountId);
      if (await this.store.taken(instance.id, request.name, request.port, tx)) {
        throw new KisteError('S11', { message: `${machineName} already has a service named ${request.name} or one on port ${request.port}`, param: 'name' });
      }
      if ((await this.store.count(instance.id, tx)) >= this.limits.servicesPerMachine) {
        throw new KisteError('L14', { message: `A machine can have at most ${this.limits.servicesPerMachine} hosted services` });
      }
      const service = await this.store.create(tx, {
        id: newId(), accountId, instanceId: instance.id, name: request.name, port: request.port,
        description: request.description ?? '', key: newServiceKey(), access: request.access ?? 'account', createdAt: this.clock.now(),
      });
      await this.event(tx, 'service.created', service, instance, addresses);
      return service;
    });
    return this.view(created, instance);
  }

  async list(accountId: string, machineName: string): Promise<ServiceView[]> {
    const instance = await this.machines.get(accountId, machineName);
    const services = await this.store.list(accountId, instance.id);
    return Promise.all(services.map((service) => this.view(service, instance)));
  }

  async get(accountId: string, machineName: string, name: string): Promise<ServiceView> {
    const instance = await this.machines.get(accountId, machineName);
    return this.view(await this.find(accountId, instance, name), instance);
  }

  /** The account's service of a machine, as stored (S10 when there is none). */
  async owned(accountId: string, machineName: string, name: string): Promise<HostedService> {
    return this.find(accountId, await this.machines.get(accountId, machineName), name);
  }

  async delete(accountId: string, machineName: string, name: string): Promise<HostedService> {
    const instance = await this.machines.get(accountId, machineName);
    const service = await this.find(accountId, instance, name);
    const deleted = await this.transactions.run(async (tx) => {
      const { count } = await this.store.delete(tx, accountId, service.id);
      if (count === 1) await this.event(tx, 'service.deleted', service, instance, this.addresses);
      return count === 1;
    });
    if (!deleted) throw new KisteError('S10', { message: `${machineName} has no service named ${name}`, param: 'service' });
    return service;
  }

  /** The service a request's address names, with its machine and URL (the proxy); null: none. */
  async resolve(key: string): Promise<(PublishedAt & { service: HostedService; instance: Instance }) | null> {
    const found = await this.store.findByKey(key);
    if (!found || !this.addresses) return null;
    const { instance, ...service } = found;
    return { service, instance, ...publishedAt(this.addresses, service.name, service.key) };
  }

  /** Bytes the proxy carried for services since the last flush. */
  countBytes(counts: ReadonlyMap<string, { in: number; out: number }>): Promise<void> {
    return this.store.addBytes(counts);
  }

  /** Where services are published (null: nowhere). */
  get publishedIn(): ServiceAddresses | null {
    return this.addresses;
  }

  private async find(accountId: string, instance: Instance, name: string): Promise<HostedService> {
    const service = await this.store.find(accountId, instance.id, name);
    if (!service) throw new KisteError('S10', { message: `${instance.name} has no service named ${name}`, param: 'service' });
    return service;
  }

  private published(): ServiceAddresses {
    if (!this.addresses) throw new KisteError('S12');
    return this.addresses;
  }

  private async view(service: HostedService, instance: Instance): Promise<ServiceView> {
    return { service, instance, status: await this.status(service, instance), ...publishedAt(this.published(), service.name, service.key) };
  }

  /** As it is now: the machine's state, then whether the port answers. */
  private async status(service: HostedService, instance: Instance): Promise<ServiceStatus> {
    if (instance.status !== 'running') return 'stopped';
    return (await this.ports.answers(instance.id, service.port).catch(() => false)) ? 'active' : 'unreachable';
  }

  /** An event of the service (its URL empty where the installation publishes none now: a delete still works). */
  private event(tx: Transaction, type: 'service.created' | 'service.deleted', service: HostedService, instance: Instance, addresses: ServiceAddresses | null) {
    const publicUrl = addresses ? publishedAt(addresses, service.name, service.key).publicUrl : '';
    return appendEvent(tx, service.accountId, {
      type, resourceType: 'hosted_service', resourceId: service.id,
      data: { name: service.name, port: service.port, instance_name: instance.name, public_url: publicUrl },
    });
  }
}

/** SERVICE_KEY_LENGTH random characters of the key alphabet (50 bits: a URL is not found by trying). */
export function newServiceKey(): string {
  return Array.from({ length: SERVICE_KEY_LENGTH }, () => SERVICE_KEY_ALPHABET[randomInt(SERVICE_KEY_ALPHABET.length)]).join('');
}
