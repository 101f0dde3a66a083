// What the create page shows while a machine is on its way: the image build it waits for (with the
// step the service names and when it asks again), then the boot with the time it has taken so far.
import { useEffect, useState } from 'preact/hooks';
import { Link } from '../../router';
import { Button, Loading, withoutCode } from '../../ui/kit';
import type { CreateProgress } from '../../machine/create';

/** The current time, once a second, while shown (a clock for the page; it makes no requests). */
function useNow(): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(timer);
  }, []);
  return now;
}

export function CreateProgressPanel({ progress, onCancel }: { progress: CreateProgress; onCancel(): void }) {
  const now = useNow();
  if (progress.stage === 'waiting-for-image') {
    const seconds = Math.max(0, Math.ceil((progress.retryAt - now) / 1000));
    return (
      <section class="card progress" aria-labelledby="progress-heading">
        <h2 id="progress-heading">Waiting for the machine image</h2>
        <Loading label={`${withoutCode(progress.error.message)}.`} />
        <p class="hint">
          The service builds its machine image at its first start and after an update; nothing was created yet. Trying again in {seconds} s.
        </p>
        <Button onClick={onCancel}>Stop waiting</Button>
      </section>
    );
  }
  if (progress.stage === 'booting') {
    const seconds = Math.round((now - progress.since) / 1000);
    return (
      <section class="card progress" aria-labelledby="progress-heading">
        <h2 id="progress-heading">Creating {progress.name ?? 'the machine'}</h2>
        <ol class="create-steps">
          <li class={progress.created ? 'done' : 'current'}>{progress.created ? `Created ${progress.name}` : 'Creating the disk'}</li>
          <li class={progress.created ? 'current' : ''}>Booting until SSH and commands are accepted</li>
        </ol>
        <Loading label={progress.created ? 'Booting…' : 'Creating…'} />
        <p class="hint">
          {seconds} s so far. This page opens the machine when it runs. You can leave it: the machine keeps booting and appears on <Link href="/">your machines</Link>.
        </p>
      </section>
    );
  }
  return null;
}
