// Hosted services (published ports, docs/hosted-services.md): a machine's port at a URL of its own.
// The rules live here: names and ports unique per machine, at most Limits.servicesPerMachine, a
// random key fixed at creation, the URL from the configured addresses (S12 when there are none),
// and the status as it is now (the machine's state, then whether the port answers).
import { randomInt } from 'node:crypto';
import { KisteError } from '../errors';
import type { AccountStore } from '../store/accounts';
import { appendEvent } from '../store/events';
import type { HostedService, HostedServiceChanges, HostedServiceStore, NewHostedService } from '../store/hosted-services';
import type { Instance } from '../store/instances';
import type { ServiceCredentialStore } from '../store/service-credentials';
import type { Clock } from './clock';
import type { DeclaredService } from './environment-rules';
import type { Limits } from './limits';
import { newId } from './secrets';
import { publishedAt, SERVICE_KEY_ALPHABET, SERVICE_KEY_LENGTH, type PublishedAt, type ServiceAddresses } from './service-addresses';
import type { Transaction, Transactions } from './transactions';

export type ServiceAccess = 'account' | 'public';

/** A machine that wakes on a request stops again after this long unused, unless its services say otherwise (a stranger's request must not start it for good). */
export const WAKE_IDLE_STOP_MINUTES = 30;
/** At most this many `service.status_changed` per service a minute (per replica): a flapping port cannot flood the stream. */
const STATUS_EVENTS_PER_MINUTE = 4;
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
  wakeOnRequest?: boolean;
  idleStopMinutes?: number | null;
}

type ServiceEventType = 'service.created' | 'service.updated' | 'service.status_changed' | 'service.deleted';

/** A service as the API shows it. */
export interface ServiceView extends PublishedAt {
  service: HostedService;
  instance: Instance;
  status: ServiceStatus;
}

export class HostedServices {
  private readonly statusEventAt = new Map<string, number[]>();

  constructor(
    private readonly transactions: Transactions,
    private readonly store: HostedServiceStore,
    private readonly accounts: AccountStore,
    private readonly machines: ServiceMachines,
    private readonly ports: ServicePorts,
    private readonly addresses: ServiceAddresses | null,
    private readonly limits: Limits,
    private readonly clock: Clock,
    /** What lets clients into private services: ended when a service's access changes. */
    private readonly credentials: ServiceCredentialStore,
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
      const service = await this.store.create(tx, this.newRow(accountId, instance.id, request));
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

  /** Changes access, description or the wake settings; a `service.updated` event. */
  async update(accountId: string, machineName: string, name: string, changes: HostedServiceChanges): Promise<ServiceView> {
    const instance = await this.machines.get(accountId, machineName);
    const service = await this.find(accountId, instance, name);
    const updated = await this.transactions.run(async (tx) => {
      if ((await this.store.update(tx, accountId, service.id, changes, this.clock.now())).count !== 1) return null;
      // A service made public and private again must not let in what it let in before.
      if (changes.access !== undefined && changes.access !== service.access) await this.credentials.endForService(service.id, tx);
      const now = { ...service, ...Object.fromEntries(Object.entries(changes).filter(([, value]) => value !== undefined)) } as HostedService;
      await this.event(tx, 'service.updated', now, instance, this.addresses, { access: now.access });
      return now;
    });
    if (!updated) throw new KisteError('S10', { message: `${machineName} has no service named ${name}`, param: 'service' });
    return this.view(await this.find(accountId, instance, name), instance);
  }

  /**
   * A machine created from an environment publishes the services it declares, as creates of its
   * owner would (nothing where the installation publishes no services: the environment may come
   * from one that does).
   */
  async publishDeclared(accountId: string, instance: Instance, declared: DeclaredService[]): Promise<string[]> {
    if (!this.addresses) return [];
    const failed: string[] = [];
    for (const service of declared) {
      // The machine exists: a service that cannot be published is said, not the create failed.
      await this.create(accountId, instance.name, {
        name: service.name, port: service.port, description: service.description, access: service.access,
        wakeOnRequest: service.wake_on_request, idleStopMinutes: service.idle_stop_minutes,
      }).catch(() => failed.push(service.name));
    }
    return failed;
  }

  /**
   * A fork's copy publishes what its source published, each under a new key (its URLs are its own),
   * with the same access and wake settings.
   */
  async copyToFork(source: Instance, copy: Instance): Promise<void> {
    const services = await this.store.ofMachine(source.id);
    if (services.length === 0) return;
    await this.transactions.run(async (tx) => {
      for (const service of services) {
        const created = await this.store.create(tx, this.newRow(copy.accountId, copy.id, { ...service, access: service.access as ServiceAccess }));
        await this.event(tx, 'service.created', created, copy, this.addresses);
      }
    });
  }

  /**
   * Running machines whose services have been idle (no request carried, no connection held) for the
   * smallest idle time of their services, counted from the last use or the machine's last change
   * (it started), whichever is later.
   */
  async idleMachines(): Promise<Instance[]> {
    const now = this.clock.now().getTime();
    const byMachine = new Map<string, { instance: Instance; minutes: number; lastUse: number }>();
    for (const { instance, ...service } of await this.store.idleCandidates()) {
      const entry = byMachine.get(instance.id) ?? { instance, minutes: Infinity, lastUse: instance.updatedAt.getTime() };
      entry.minutes = Math.min(entry.minutes, service.idleStopMinutes ?? WAKE_IDLE_STOP_MINUTES);
      entry.lastUse = Math.max(entry.lastUse, service.lastRequestAt?.getTime() ?? 0);
      byMachine.set(instance.id, entry);
    }
    const idle = [...byMachine.values()].filter((entry) => now - entry.lastUse >= entry.minutes * 60_000).map((entry) => entry.instance);
    // A command running in it (an exec, a setup) is use too.
    const running = await Promise.all(idle.map((instance) => this.store.commandRunning(instance.id)));
    return idle.filter((_, i) => !running[i]);
  }

  /** Machines with other sessions open (SSH tunnels, terminals, desktops) count as in use: their services' last use is now. */
  markMachinesInUse(instanceIds: string[]): Promise<void> {
    return this.store.markMachinesInUse(instanceIds, this.clock.now());
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

  /** Bytes the proxy carried for services since the last flush (each of them in use now). */
  countBytes(counts: ReadonlyMap<string, { in: number; out: number }>): Promise<void> {
    return this.store.addBytes(counts, this.clock.now());
  }

  /**
   * A status seen (a read, the proxy, a wake): when it differs from the last one seen, a
   * `service.status_changed` event (the first one seen, at creation, is no change).
   */
  async noteStatus(service: HostedService, instance: Instance, status: ServiceStatus): Promise<void> {
    if (service.lastStatus === status) return;
    // Past the bound the change is not recorded either: the next sighting after it says where it went.
    const now = Date.now();
    const recent = (this.statusEventAt.get(service.id) ?? []).filter((at) => now - at < 60_000);
    if (service.lastStatus !== null && recent.length >= STATUS_EVENTS_PER_MINUTE) return;
    if (this.statusEventAt.size > 10_000) this.statusEventAt.clear();
    this.statusEventAt.set(service.id, [...recent, now]);
    await this.transactions.run(async (tx) => {
      if ((await this.store.noteStatus(tx, service.id, service.lastStatus, status)) && service.lastStatus !== null) {
        await this.event(tx, 'service.status_changed', service, instance, this.addresses, { status });
      }
    });
    service.lastStatus = status;
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

  /** A new service's row: a key of its own, the defaults filled in. */
  private newRow(accountId: string, instanceId: string, request: NewService): NewHostedService {
    return {
      id: newId(), accountId, instanceId, name: request.name, port: request.port, description: request.description ?? '',
      key: newServiceKey(), access: request.access ?? 'account', wakeOnRequest: request.wakeOnRequest ?? false,
      idleStopMinutes: request.idleStopMinutes ?? null, createdAt: this.clock.now(),
    };
  }

  private async view(service: HostedService, instance: Instance): Promise<ServiceView> {
    const status = await this.status(service, instance);
    await this.noteStatus(service, instance, status);
    return { service, instance, status, ...publishedAt(this.published(), service.name, service.key) };
  }

  /** As it is now: the machine's state, then whether the port answers. */
  private async status(service: HostedService, instance: Instance): Promise<ServiceStatus> {
    if (instance.status !== 'running') return 'stopped';
    return (await this.ports.answers(instance.id, service.port).catch(() => false)) ? 'active' : 'unreachable';
  }

  /** An event of the service (its URL empty where the installation publishes none now: a delete still works). */
  private event(tx: Transaction, type: ServiceEventType, service: HostedService, instance: Instance, addresses: ServiceAddresses | null, more: { status?: ServiceStatus; access?: string } = {}) {
    const publicUrl = addresses ? publishedAt(addresses, service.name, service.key).publicUrl : '';
    return appendEvent(tx, service.accountId, {
      type, resourceType: 'hosted_service', resourceId: service.id,
      data: { name: service.name, port: service.port, instance_name: instance.name, public_url: publicUrl, ...more },
    });
  }
}

/** SERVICE_KEY_LENGTH random characters of the key alphabet (50 bits: a URL is not found by trying). */
export function newServiceKey(): string {
  return Array.from({ length: SERVICE_KEY_LENGTH }, () => SERVICE_KEY_ALPHABET[randomInt(SERVICE_KEY_ALPHABET.length)]).join('');
}
