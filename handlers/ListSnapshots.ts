import type { Handler } from '../src/http/handler';
import { paginate } from './list';
import { presentSnapshot } from './present-snapshot';

export const handler: Handler<'ListSnapshots'> = async ({ auth, services, query }) => ({
  status: 200,
  body: paginate((await services.snapshots.list(auth.accountId, query.instance)).map(presentSnapshot), query),
});
