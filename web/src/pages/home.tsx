// Home: the account's machines with their live status, usage against the account's limits, and the
// open alerts. Kept current by account events (machine/live.ts), never by polling.
import { Link } from '../router';
import { Empty, Loaded, PageHeader } from '../ui/kit';
import { useInstanceList } from '../machine/live';
import { MachineTable } from '../machine/machine-table';
import { OpenAlerts } from '../machine/open-alerts';
import { UsageMeters, useAccountStatus } from '../machine/usage-meters';
import { MachineAvailabilityNotice } from '../machine/machine-availability';

export function HomePage() {
  const machines = useInstanceList();
  const status = useAccountStatus();
  return (
    <>
      <PageHeader title="Machines">
        <Link href="/console/new" class="button primary">
          Create machine
        </Link>
      </PageHeader>
      <MachineAvailabilityNotice status={status} />
      <OpenAlerts />
      <div class="home">
        <section aria-labelledby="machines-heading">
          <h2 id="machines-heading" class="visually-hidden">
            Your machines
          </h2>
          <Loaded load={machines}>
            {(list) =>
              list.length === 0 ? (
                <Empty>
                  <p>No machines yet.</p>
                  <Link href="/console/new" class="button primary">
                    Create your first machine
                  </Link>
                </Empty>
              ) : (
                <MachineTable machines={list} />
              )
            }
          </Loaded>
        </section>
        <UsageMeters status={status} />
      </div>
    </>
  );
}
