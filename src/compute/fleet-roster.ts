// The workers a control plane of several hosts reaches (KISTE_COMPUTE=workers): a member per
// registered worker, its client (TLS with the certificate pinned on first contact, every request
// signed), and its hello asked every few seconds. An answer renews the worker's lease in the
// database; a worker that does not answer has no client, and its machines' calls answer N01 until it
// does. A run of a worker that needs adopting (worker-adoption.ts) is adopted in the background, one
// adoption per worker at a time, so one slow adoption never holds back the other workers' leases.
import { withDeadline } from '../deadline';
import type { Accelerator, ImageProfile } from './machine-host';
import { RemoteImages } from './remote-images';
import { SupervisedWorker } from './supervised-worker';
import { adoptionNeed, adoptWorker, nextEpoch, removeWorkerStrays } from './worker-adoption';
import { introduceWorker, WorkerClient, WorkerUnreachableError, type WorkerHello } from './worker-client';
import { WorkerMachineHost } from './worker-machine-host';
import { WORKER_PROTOCOL_VERSION } from './worker-wire';

/** A heartbeat's hello: far below the lease (30 s), so a slow worker loses only its own. */
const HELLO_MS = 4_000;
/** Other calls' default deadline (machine operations give their own). */
const CALL_MS = 10_000;
/** At most one adoption of a worker per this long (a worker that keeps asking for one costs little). */
const ADOPT_EVERY_MS = 15_000;

/** A worker as the compute layer calls it: where, with which secret, trusting which certificate. */
export interface RegisteredWorker {
  id: string;
  name: string;
  address: string;
  secret: Buffer;
  certificatePem: string | null;
  /** The fencing epoch the worker was last adopted with (its row's). */
  epoch: number;
  /** Declared lost by the operator: nothing is placed on it, and its machines' files are taken as gone. */
  lost: boolean;
}

export interface WorkerContact {
  offer: { vcpu: number; memoryMib: number; diskMib: number };
  protocolVersion: number;
  /** Pinned now (first contact). */
  certificatePem?: string;
  /** The run that answered is adopted under the recorded epoch: placement may give it machines. */
  adopted: boolean;
}

/** What the fleet needs of the registry of workers (the database's, through the domain). */
export interface WorkerRegistry {
  registered(): Promise<RegisteredWorker[]>;
  answered(id: string, contact: WorkerContact): Promise<void>;
  failed(id: string, message: string): Promise<void>;
  /** The worker a machine lives on (null: none, or no such machine). */
  workerOf(machineId: string): Promise<string | null>;
  machineIdsOn(workerId: string): Promise<string[]>;
  /** Machines with a move under way (their files may be on two workers). */
  movingMachineIds(): Promise<string[]>;
  /** Moves the worker's epoch from `from` to `to`; false when another replica did first (it adopts the worker). */
  fence(id: string, from: number, to: number): Promise<boolean>;
  isLost(workerId: string): Promise<boolean>;
  /** A worker declared lost answers again and was adopted: it drains (its machines work again, none is placed on it). */
  returned(workerId: string): Promise<void>;
}

export interface RosterSettings {
  registry: WorkerRegistry;
  profile: ImageProfile;
  /** What the control plane probed, until a worker says what it runs machines with. */
  accelerator: Accelerator;
  logger: { info(object: object, message: string): void; warn(object: object, message: string): void };
}

/** One worker: its client while it answers (null otherwise), its images and host over that client. */
export class Member {
  /** The client while the worker answers its heartbeat and is adopted (SupervisedWorker's source). */
  worker: WorkerClient | null = null;
  /** The client its heartbeats use (kept between beats; the worker's once it is adopted). */
  client: WorkerClient | null = null;
  /** Its hello's started_at: a new run (it was restarted) is a return even when no heartbeat was missed. */
  run: string | null = null;
  /** The adoption under way, and when the last one began. */
  adopting: Promise<void> | null = null;
  lastAdoption = 0;
  /** This replica adopted the worker since its last beat: a return (its machines are reconciled). */
  adopted = false;
  readonly calls = new SupervisedWorker(this);
  readonly images = new RemoteImages(this.calls);
  readonly host: WorkerMachineHost;

  constructor(public registered: RegisteredWorker, accelerator: Accelerator) {
    this.host = new WorkerMachineHost(this.calls, this.images, accelerator);
  }

  /** The worker does not answer: no client until it does. */
  drop(): void {
    this.client?.close();
    this.client = null;
    this.worker = null;
  }
}

export class FleetRoster {
  private readonly members = new Map<string, Member>();

  constructor(private readonly settings: RosterSettings) {}

  /** The workers answering now. */
  up(): Member[] {
    return [...this.members.values()].filter((member) => member.worker !== null);
  }

  /** A worker that answers now; N01 otherwise. */
  member(workerId: string): Member {
    const member = this.members.get(workerId);
    if (!member?.worker) throw new WorkerUnreachableError(`worker ${workerId} does not answer now`);
    return member;
  }

  answers(workerId: string | null): boolean {
    return workerId !== null && Boolean(this.members.get(workerId)?.worker);
  }

  /**
   * One round of heartbeats: every registered worker is asked its hello (first contact pins its
   * certificate); the ids of the workers that came back (restarted, or adopted anew) are returned.
   */
  async heartbeat(): Promise<string[]> {
    const registered = await this.settings.registry.registered();
    for (const [id, member] of this.members) {
      if (registered.some((worker) => worker.id === id)) continue;
      member.drop();
      this.members.delete(id);
    }
    const back = await Promise.all(registered.map(async (worker) => ((await this.beat(worker)) ? worker.id : null)));
    return back.filter((id): id is string => id !== null);
  }

  /** Ends every worker's kept connections (at stop). */
  close(): void {
    for (const member of this.members.values()) member.drop();
    this.members.clear();
  }

  private async beat(worker: RegisteredWorker): Promise<boolean> {
    let member = this.members.get(worker.id);
    if (!member) {
      member = new Member(worker, this.settings.accelerator);
      this.members.set(worker.id, member);
    }
    member.registered = worker;
    try {
      let hello: WorkerHello | null = null;
      let pinned: string | undefined;
      if (worker.certificatePem === null) {
        // First contact: the introduction's own signed hello is this beat's.
        ({ hello, certificatePem: pinned } = await introduceWorker(worker.address, worker.secret, HELLO_MS));
        worker.certificatePem = pinned;
        this.settings.logger.info({ worker: worker.name, fingerprint: hello.tls_fingerprint }, 'first contact with a worker: its certificate is pinned');
      }
      const client = (member.client ??= new WorkerClient({ endpoint: { address: worker.address, certificatePem: worker.certificatePem! }, secret: worker.secret, timeoutMs: CALL_MS }));
      // A short deadline of its own: one worker that is slow to answer must not hold back the other workers' leases.
      hello ??= await withDeadline(client.hello(), HELLO_MS, () => new WorkerUnreachableError(`the worker did not answer its hello within ${HELLO_MS} ms`));
      if (hello.protocol_version !== WORKER_PROTOCOL_VERSION) throw new Error(`the worker speaks protocol ${hello.protocol_version}, this control plane ${WORKER_PROTOCOL_VERSION}`);
      const need = adoptionNeed(hello, worker.epoch);
      // The lease first: an adoption may take a while, and the worker answers meanwhile; new
      // machines go to it only once it is adopted.
      await this.settings.registry.answered(worker.id, {
        offer: { vcpu: hello.offer.vcpu, memoryMib: hello.offer.memory_mib, diskMib: hello.offer.disk_mib },
        protocolVersion: hello.protocol_version,
        adopted: need !== 'adopt',
        ...(pinned ? { certificatePem: pinned } : {}),
      });
      if (need === 'adopt') {
        // Its machines are reached once it is adopted (by this replica or another); a new run is not the old one's client.
        if (member.run !== hello.started_at) member.worker = null;
        this.adopt(member, worker, client, hello);
        return false;
      }
      const epochMoved = client.epoch !== hello.epoch; // adopted by another replica meanwhile
      client.epoch = hello.epoch;
      if (need === 'remove-strays') this.removeStraysAgain(member, worker, client);
      const back = member.adopted || epochMoved || member.worker === null || member.run !== hello.started_at;
      member.adopted = false;
      member.worker = client;
      member.run = hello.started_at;
      void member.images.refresh(this.settings.profile).catch(() => null); // read at its own pace
      if (back) this.settings.logger.info({ worker: worker.name, epoch: hello.epoch }, 'worker answers: its machines are adopted and what it cut short is finished');
      return back;
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      if (member.worker) this.settings.logger.warn({ worker: worker.name, err: message }, 'worker does not answer: calls for its machines answer N01 until it does');
      member.drop();
      await this.settings.registry.failed(worker.id, message).catch(() => undefined);
      return false;
    }
  }

  /** Adopts the worker's run in the background. */
  private adopt(member: Member, worker: RegisteredWorker, client: WorkerClient, hello: WorkerHello): void {
    this.inBackground(member, worker, 'adopting the worker failed; it is tried again', async () => {
      member.adopted ||= await this.adoptRun(worker, client, hello.epoch);
    });
  }

  /** The adoption's removal of strays failed, stalled or never came: asked again under the worker's epoch. */
  private removeStraysAgain(member: Member, worker: RegisteredWorker, client: WorkerClient): void {
    this.inBackground(member, worker, 'the worker\'s strays could not be removed; tried again', async () => {
      const removed = await removeWorkerStrays(client, () => this.ownedOn(worker.id));
      this.settings.logger.info({ worker: worker.name, removed }, 'the worker\'s strays removed again');
    });
  }

  /** Runs an adoption's work for the worker in the background: one at a time per worker, at most one per ADOPT_EVERY_MS; a failure is logged and tried again later. */
  private inBackground(member: Member, worker: RegisteredWorker, failure: string, work: () => Promise<void>): void {
    if (member.adopting || Date.now() - member.lastAdoption < ADOPT_EVERY_MS) return;
    member.lastAdoption = Date.now();
    member.adopting = work()
      .catch((error: Error) => this.settings.logger.warn({ worker: worker.name, err: error.message }, failure))
      .finally(() => {
        member.adopting = null;
      });
  }

  /** The machines a worker holds by the records: those placed on it, and those on their way between workers (their files may be on it). */
  async ownedOn(workerId: string): Promise<string[]> {
    return [...(await this.settings.registry.machineIdsOn(workerId)), ...(await this.settings.registry.movingMachineIds())];
  }

  /**
   * Adopts a run of the worker under the epoch after both its own and its row's: the row first, by
   * compare-and-set (false: another replica got there first), then the worker is fenced, and then
   * it removes every machine none of its rows owns (a machine on its way to it counts as its own).
   */
  private async adoptRun(worker: RegisteredWorker, client: WorkerClient, helloEpoch: number): Promise<boolean> {
    const epoch = nextEpoch(helloEpoch, worker.epoch);
    if (!(await this.settings.registry.fence(worker.id, worker.epoch, epoch))) return false;
    const removed = await adoptWorker(client, epoch, () => this.ownedOn(worker.id));
    if (worker.lost) {
      await this.settings.registry.returned(worker.id);
      this.settings.logger.warn({ worker: worker.name }, 'a worker declared lost answers again: it drains now (its machines work again, none is placed on it; worker-activate takes it back)');
    }
    this.settings.logger.info({ worker: worker.name, epoch, removed }, removed.length ? 'worker adopted: machines no record owns were removed' : 'worker adopted');
    return true;
  }
}
