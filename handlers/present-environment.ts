// Environments and their versions → API shapes. Secret files appear by path only.
import type { components } from '../src/generated/api';
import type { Environment, EnvironmentVersion, EnvironmentWithCurrent } from '../src/store/environments';
import { servicesOf } from '../src/domain/environments';
import { iso } from './present';

type Schemas = components['schemas'];

export function presentEnvironment(environment: Environment): Schemas['EnvironmentResponse'] {
  return {
    id: environment.id,
    name: environment.name,
    current_version: environment.currentVersion,
    created_at: iso(environment.createdAt),
    updated_at: iso(environment.updatedAt),
  };
}

export function presentEnvironmentVersion(version: EnvironmentVersion, environmentName: string): Schemas['EnvironmentVersionResponse'] {
  return {
    id: version.id,
    environment_id: version.environmentId,
    environment_name: environmentName,
    version: version.version,
    repositories: version.repositories as unknown as Schemas['RepositorySpec'][],
    variables: version.variables as unknown as Record<string, string>,
    secret_paths: version.secretPaths as unknown as string[],
    setup_script: version.setupScript,
    services: servicesOf(version) as Schemas['EnvironmentServiceSpec'][],
    created_at: iso(version.createdAt),
  };
}

export function presentEnvironmentDetail(environment: EnvironmentWithCurrent): Schemas['EnvironmentDetailResponse'] {
  return { ...presentEnvironment(environment), current: presentEnvironmentVersion(environment.current, environment.name) };
}
