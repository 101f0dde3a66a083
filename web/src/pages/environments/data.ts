// What the environment pages read: the account's environments and an environment's versions.
import { api, ok, type Schemas } from '../../api';
import { allPages } from '../../ui/paged-list';

export type Environment = Schemas['EnvironmentResponse'];
export type EnvironmentDetail = Schemas['EnvironmentDetailResponse'];
export type EnvironmentVersion = Schemas['EnvironmentVersionResponse'];
export type Repository = Schemas['RepositorySpec'];

export function environmentPath(name: string): string {
  return `/console/environments/${encodeURIComponent(name)}`;
}

export function fetchEnvironments(): Promise<Environment[]> {
  return allPages((after) => ok(api.GET('/v1/environments', { params: { query: { limit: 100, starting_after: after } } })));
}

export function fetchVersions(name: string): Promise<EnvironmentVersion[]> {
  return allPages((after) => ok(api.GET('/v1/environments/{name}/versions', { params: { path: { name }, query: { limit: 100, starting_after: after } } })));
}
