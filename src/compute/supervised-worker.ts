// The local worker's calls as the control plane makes them on one box: each goes to the worker the
// supervisor has up now, and while none is up (it died, it is being started again) it fails at once
// as WorkerUnreachableError, which the API answers with 503 N01 and the operations leave open for
// the reconciler.
import type { WebSocket } from 'ws';
import { WorkerUnreachableError, type WorkerCalls, type WorkerClient } from './worker-client';

export interface WorkerSource {
  /** The client of the worker while it is up; null otherwise. */
  readonly worker: WorkerClient | null;
}

export class SupervisedWorker implements WorkerCalls {
  constructor(private readonly source: WorkerSource) {}

  reachable(): boolean {
    return this.source.worker !== null;
  }

  call(method: string, path: string, operationId: string, requestBody?: unknown, timeoutMs?: number): Promise<unknown> {
    return this.current(`${method} ${path}`).then((worker) => worker.call(method, path, operationId, requestBody, timeoutMs));
  }

  upgrade<T>(path: string, operationId: string, attach: (ws: WebSocket) => T, timeoutMs?: number): Promise<T> {
    return this.current(`GET ${path}`).then((worker) => worker.upgrade(path, operationId, attach, timeoutMs));
  }

  private async current(what: string): Promise<WorkerClient> {
    const worker = this.source.worker;
    if (!worker) throw new WorkerUnreachableError(`${what}: the compute worker is not running now (it is being started again)`);
    return worker;
  }
}
