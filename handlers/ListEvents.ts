import type { components } from '../src/generated/api';
import type { Handler } from '../src/http/handler';

type EventResponse = components['schemas']['ControlEventResponse'];

export const handler: Handler<'ListEvents'> = async ({ auth, services, query, request }) => {
  const page = await services.events.read(auth.accountId, {
    after: query.after === undefined ? undefined : BigInt(query.after),
    limit: query.limit ?? 100,
    waitMs: query.wait_ms,
    tail: query.tail,
    resourceType: query.resource_type,
    resourceId: query.resource_id,
    signal: request.signal,
  });
  return {
    status: 200,
    body: {
      object: 'event_list',
      data: page.events.map((event) => ({
        sequence: Number(event.sequence),
        object: 'event',
        type: event.type as EventResponse['type'],
        resource_type: event.resourceType as EventResponse['resource_type'],
        resource_id: event.resourceId,
        data: event.data as EventResponse['data'],
        created_at: event.createdAt.toISOString(),
      })),
      next_cursor: Number(page.nextCursor),
      has_more: page.hasMore,
    },
  };
};
