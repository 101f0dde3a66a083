import type { Handler } from '../src/http/handler';
import type { components } from '../src/generated/api';

type Step = components['schemas']['InstanceSetupStep'];

export const handler: Handler<'GetInstanceSetup'> = async ({ auth, services, params }) => {
  const instance = await services.instances.get(auth.accountId, params.name);
  const setup = await services.instanceSetups.find(auth.accountId, instance.id);
  const applied = await services.environments.describeVersion(auth.accountId, instance.environmentVersionId);
  return {
    status: 200,
    body: {
      object: 'instance_setup',
      instance: instance.name,
      environment_version_id: instance.environmentVersionId,
      environment_name: applied?.name ?? null,
      environment_version: applied?.version ?? null,
      status: instance.setupStatus as 'none' | 'pending' | 'running' | 'succeeded' | 'failed',
      error: instance.setupError,
      steps: (setup?.steps as unknown as Step[] | undefined) ?? [],
      output: setup?.output ?? '',
      output_truncated: setup?.outputTruncated ?? false,
    },
  };
};
