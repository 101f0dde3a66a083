// A client of a kiste-worker process a test (or benchmark) started itself, in that worker's data
// folder, adopted under the next epoch as a control plane would (without removing anything), so its
// machine commands are taken.
import { join } from 'node:path';
import { WorkerClient } from '../../src/compute/worker-client';
import { readWorkerSecret } from '../../src/worker/worker-secret';

export async function adoptedWorkerClient(dataDir: string, options: { timeoutMs?: number } = {}): Promise<WorkerClient> {
  const client = new WorkerClient({ endpoint: { socketPath: join(dataDir, 'worker.sock') }, secret: readWorkerSecret(join(dataDir, 'worker.secret'), { create: false }), ...options });
  await client.fence((await client.hello()).epoch + 1);
  return client;
}
