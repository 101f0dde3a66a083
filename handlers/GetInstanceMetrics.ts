import type { Handler } from '../src/http/handler';
import { iso } from './present';

export const handler: Handler<'GetInstanceMetrics'> = async ({ auth, services, params }) => {
  const sample = await services.instances.metrics(auth.accountId, params.name);
  return {
    status: 200,
    body: {
      object: 'instance_metrics',
      instance: params.name,
      sampled_at: iso(sample.sampledAt),
      cpu: sample.cpu,
      memory: sample.memory,
      disk: sample.disk,
      uptime_seconds: sample.uptime_seconds,
      processes: sample.processes,
    },
  };
};
