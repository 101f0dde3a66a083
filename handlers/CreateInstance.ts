import type { Handler } from '../src/http/handler';
import { presentInstance } from './present-instance';

export const handler: Handler<'CreateInstance'> = async ({ auth, services, body }) => {
  const instance = await services.instances.create(auth.accountId, {
    name: body.name,
    vcpu: body.vcpu,
    memoryMib: body.memory_mib,
    diskMib: body.disk_mib,
    sshPublicKey: body.ssh_public_key,
    image: body.image,
    environment: body.environment,
    ttlSeconds: body.ttl_seconds,
    autoSnapshotSeconds: body.auto_snapshot_seconds,
    snapshot: body.snapshot,
  });
  // The environment's hosted services are the machine's from its start (openapi: EnvironmentServiceSpec).
  await services.hostedServices.publishDeclared(auth.accountId, instance, await services.environments.declaredServices(auth.accountId, instance.environmentVersionId));
  return { status: 200, body: presentInstance(instance, services.instances.latestImageVersion()) };
};
