// The machine's lifecycle calls. Each answers the machine as it is now: 200 when the operation
// finished within 20 s, 202 while it continues in the background (its event marks the end, and
// the page refetches then).
import { api, ok, type Instance } from '../../api';

export type LifecycleCall = 'start' | 'stop' | 'stop-keep-memory' | 'restart' | 'upgrade';

export function runLifecycle(call: LifecycleCall, name: string): Promise<Instance> {
  const path = { params: { path: { name } } };
  switch (call) {
    case 'start':
      return ok(api.POST('/v1/instances/{name}/resume', path));
    case 'stop':
      return ok(api.POST('/v1/instances/{name}/stop', { ...path, body: { snapshot: false } }));
    case 'stop-keep-memory':
      return ok(api.POST('/v1/instances/{name}/stop', { ...path, body: { snapshot: true } }));
    case 'restart':
      return ok(api.POST('/v1/instances/{name}/restart', path));
    case 'upgrade':
      return ok(api.POST('/v1/instances/{name}/upgrade', path));
  }
}

/** Deletes the machine; true when it is gone already, false when the deletion continues (202). */
export async function deleteMachine(name: string): Promise<boolean> {
  const pending = api.DELETE('/v1/instances/{name}', { params: { path: { name } } });
  await ok(pending);
  return (await pending).response.status === 200;
}
