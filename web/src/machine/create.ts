// Creating a machine from the console: POST /v1/instances answers once the machine runs (about a
// minute on a slow host), so the page shows the way there: the account's events say when the
// machine exists and when it runs. While the service's machine image is still being built the
// answer is 503 K06 (nothing was created, so asking again is safe): the page shows the build step
// from the message and asks again after Retry-After, like the CLI.
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, ApiError, ok, type Schemas } from '../api';
import { useAccountEvents } from '../events';
import { navigate } from '../router';
import { asApiError } from '../ui/kit';
import { fetchInstance, eventInstanceName } from './live';
import { machinePath } from './format';
import { pause } from '../visible';

export type CreateBody = Schemas['CreateInstanceRequest'];

export type CreateProgress =
  | { stage: 'idle' }
  | { stage: 'waiting-for-image'; error: ApiError; retryAt: number }
  | { stage: 'booting'; since: number; name: string | null; created: boolean }
  | { stage: 'failed'; error: ApiError; name: string | null };

/** Between two asks while the image is built, when the answer names no Retry-After (the spec's 30 s). */
const IMAGE_RETRY_MS = 30_000;

interface Watched {
  name: string | null;
  id: string | null;
}

export function useCreateMachine() {
  const [progress, setProgress] = useState<CreateProgress>({ stage: 'idle' });
  const watched = useRef<Watched | null>(null);
  const running = useRef<AbortController | null>(null);
  useEffect(() => () => running.current?.abort(), []);

  const arrived = (name: string) => {
    watched.current = null;
    navigate(machinePath(name), { replace: true });
  };

  useAccountEvents((event) => {
    const machine = watched.current;
    if (!machine || event.resource_type !== 'instance') return;
    const name = eventInstanceName(event);
    // Without a chosen name, the first machine created after the request is taken to be this one.
    if (event.type === 'instance.created' && !machine.id && (machine.name === null || machine.name === name)) {
      machine.id = event.resource_id;
      machine.name = name;
      setProgress((current) => (current.stage === 'booting' ? { ...current, name, created: true } : current));
    } else if (event.resource_id === machine.id && event.type === 'instance.running' && name) {
      arrived(name);
    }
  });

  const start = async (body: CreateBody) => {
    running.current?.abort();
    const controller = new AbortController();
    running.current = controller;
    watched.current = { name: body.name ?? null, id: null };
    for (;;) {
      setProgress({ stage: 'booting', since: Date.now(), name: body.name ?? null, created: false });
      try {
        const machine = await ok(api.POST('/v1/instances', { body, signal: controller.signal }));
        if (machine.status === 'running') return arrived(machine.name);
        watched.current = { name: machine.name, id: machine.id }; // the running event finishes it
        return;
      } catch (failure) {
        if (controller.signal.aborted) return;
        const error = asApiError(failure);
        if (error.code === 'K06') {
          const waitMs = Math.max(1000, (error.retryAfterSeconds ?? 0) * 1000 || IMAGE_RETRY_MS);
          setProgress({ stage: 'waiting-for-image', error, retryAt: Date.now() + waitMs });
          await pause(waitMs, controller.signal);
          if (controller.signal.aborted) return;
          continue;
        }
        const machine = watched.current;
        if (error.status === 0 && machine?.id && machine.name) {
          // The answer was lost (connection dropped) but the machine exists: its events finish this.
          const now = await fetchInstance(machine.name).catch(() => null);
          if (now?.status === 'running') return arrived(now.name);
          if (now && now.status !== 'error') return;
        }
        watched.current = null;
        setProgress({ stage: 'failed', error, name: machine?.id ? machine.name : null });
        return;
      }
    }
  };

  const cancel = () => {
    running.current?.abort();
    watched.current = null;
    setProgress({ stage: 'idle' });
  };

  return { progress, start, cancel };
}
