// What operators scrape (Prometheus text format): machines by state, lifecycle operations' durations
// and failures, guest links dropped for bad input, and the process's own figures. Callers hold the
// small observer interfaces they declare themselves (the domain's OperationObserver, the agent
// client's onLinkDropped), never prom-client.
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

export interface ServiceMetricsSources {
  /** Machines this service's records hold, counted by status (read at each scrape). */
  machinesByStatus(): Promise<Record<string, number>>;
  /** What a worker process counted in its current run (read at each scrape); null when it has none or does not answer. */
  computeCounts?(): Promise<ComputeCounts | null>;
  /** The registered workers (several hosts), read at each scrape. */
  workers?(): Promise<WorkerFigures[]>;
}

/** One registered worker as operators see it: whether it answers its heartbeat, and what placement could still give it. */
export interface WorkerFigures {
  name: string;
  state: string;
  answers: boolean;
  free: { vcpu: number; memoryMib: number; diskMib: number };
}

/** A worker's counts since its run began (a new run counts from zero again). */
export interface ComputeCounts {
  run: string;
  agentLinksDropped: number;
}

export class ServiceMetrics {
  readonly registry = new Registry();
  private readonly operations: Histogram<'operation' | 'outcome'>;
  private readonly droppedLinks: Counter<'peer'>;

  constructor(sources: ServiceMetricsSources) {
    collectDefaultMetrics({ register: this.registry, prefix: 'kiste_' });
    new Gauge({
      name: 'kiste_machines',
      help: 'Machines by status, as the records hold them.',
      labelNames: ['status'],
      registers: [this.registry],
      async collect() {
        this.reset();
        for (const [status, count] of Object.entries(await sources.machinesByStatus())) this.set({ status }, count);
      },
    });
    new Gauge({
      name: 'kiste_worker_up',
      help: 'Registered workers (several hosts): 1 while the worker answers its heartbeat (its lease runs), 0 otherwise.',
      labelNames: ['worker', 'state'],
      registers: [this.registry],
      async collect() {
        this.reset();
        for (const worker of (await sources.workers?.()) ?? []) this.set({ worker: worker.name, state: worker.state }, worker.answers ? 1 : 0);
      },
    });
    new Gauge({
      name: 'kiste_worker_free',
      help: 'What placement could still give each registered worker: its offer (within the operator\'s ceiling) less what its machines hold.',
      labelNames: ['worker', 'resource'],
      registers: [this.registry],
      async collect() {
        this.reset();
        for (const worker of (await sources.workers?.()) ?? []) {
          this.set({ worker: worker.name, resource: 'vcpu' }, worker.free.vcpu);
          this.set({ worker: worker.name, resource: 'memory_mib' }, worker.free.memoryMib);
          this.set({ worker: worker.name, resource: 'disk_mib' }, worker.free.diskMib);
        }
      },
    });
    this.operations = new Histogram({
      name: 'kiste_operation_duration_seconds',
      help: 'Lifecycle operations (create, fork, stop, resume, restart, upgrade, delete, expire) from claim to end; outcome error: the machine ended in the error state.',
      labelNames: ['operation', 'outcome'],
      buckets: [0.5, 1, 2, 5, 10, 20, 60, 120, 300],
      registers: [this.registry],
    });
    // A worker's drops are added as they grow: what each of its runs counted beyond the last scrape.
    let seen: ComputeCounts | null = null;
    this.droppedLinks = new Counter({
      name: 'kiste_guest_links_dropped_total',
      help: 'Links to a machine dropped because its guest agent or QEMU sent what does not fit (or stopped reading).',
      labelNames: ['peer'],
      registers: [this.registry],
      async collect() {
        const now = await sources.computeCounts?.().catch(() => null);
        if (!now) return;
        const before = seen?.run === now.run ? seen.agentLinksDropped : 0;
        if (now.agentLinksDropped > before) this.inc({ peer: 'agent' }, now.agentLinksDropped - before);
        seen = now;
      },
    });
  }

  operationEnded(operation: string, outcome: 'ok' | 'error', seconds: number): void {
    this.operations.observe({ operation, outcome }, seconds);
  }

  linkDropped(peer: 'agent' | 'qmp'): void {
    this.droppedLinks.inc({ peer });
  }

  /** The scrape: Prometheus text format. */
  async text(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
