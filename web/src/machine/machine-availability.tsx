// Whether this server can start machines now (GET /v1/status `machines`): a notice on the home and
// create pages while it cannot, with the reason and what to do. While the image is being built, or
// the compute worker is being started again, the status is asked again every POLL_MS (neither raises
// an account event), so the notice follows the build's step and goes away once machines can start.
import { useEffect } from 'preact/hooks';
import type { Schemas } from '../api';

type Status = Schemas['ControlPlaneStatusResponse'];

const POLL_MS = 10_000;

const TITLES: Record<NonNullable<Status['machines']['cause']>, string> = {
  image_building: 'New machines can start once the machine image is built.',
  image_failed: 'New machines cannot start: the machine image could not be built.',
  isolation: 'New machines cannot start on this server.',
  compute_unreachable: 'The compute service cannot be reached right now.',
};

/** Causes that pass by themselves: the notice asks again until they have. */
const PASSING: readonly (Status['machines']['cause'])[] = ['image_building', 'compute_unreachable'];

export function MachineAvailabilityNotice({ status }: { status: { data: Status | undefined; reload(): void } }) {
  const machines = status.data?.machines;
  const building = machines?.cause === 'image_building';
  const passing = Boolean(machines && !machines.available && PASSING.includes(machines.cause));
  useEffect(() => {
    if (!passing) return undefined;
    const timer = setInterval(status.reload, POLL_MS);
    return () => clearInterval(timer);
  }, [passing, status.reload]);
  if (!machines || machines.available || !machines.cause) return null;
  return (
    <section class={`notice ${building ? 'info' : 'error'} machine-availability`} role="status" aria-labelledby="machine-availability-heading">
      <h2 id="machine-availability-heading">{TITLES[machines.cause]}</h2>
      {machines.reason && <p>{machines.reason}.</p>}
      {building ? (
        <p class="hint">This notice follows the build; a machine you create meanwhile waits for the image.</p>
      ) : (
        <>
          {machines.hint && <p class="hint">{machines.hint}</p>}
          <p class="hint">Machines that already run are not affected.</p>
        </>
      )}
    </section>
  );
}
