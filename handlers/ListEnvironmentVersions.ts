import type { Handler } from '../src/http/handler';
import { presentEnvironmentVersion } from './present-environment';

export const handler: Handler<'ListEnvironmentVersions'> = async ({ auth, services, params, query }) => {
  const limit = query.limit ?? 20;
  const versions = await services.environments.versions(auth.accountId, params.name, limit + 1);
  const data = versions.slice(0, limit).map((version) => presentEnvironmentVersion(version, params.name));
  return {
    status: 200,
    body: { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null, has_more: versions.length > limit },
  };
};
