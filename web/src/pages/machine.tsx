// A machine's page: its state and actions, and tabs (?tab=) for the overview, live metrics, the
// console log, its commands, a terminal, its hosted services and its environment setup. The machine
// is kept current by account events (machine/live.ts); a deletion or a rename elsewhere moves the
// page along.
import { useEffect } from 'preact/hooks';
import { Link, navigate } from '../router';
import { Loaded, PageHeader, StatusBadge } from '../ui/kit';
import { useInstance } from '../machine/live';
import { machinePath } from '../machine/format';
import { MachineActions } from './machine/actions';
import { Overview } from './machine/overview';
import { MetricsTab } from './machine/metrics-tab';
import { LogsTab } from './machine/logs-tab';
import { CommandsTab } from './machine/commands-tab';
import { TerminalTab } from './machine/terminal-tab';
import { ServicesTab } from './machine/services-tab';
import { SetupTab } from './machine/setup-tab';
import type { Instance } from '../api';

const TABS = [
  { id: 'overview', label: 'Overview', Panel: Overview },
  { id: 'metrics', label: 'Metrics', Panel: MetricsTab },
  { id: 'logs', label: 'Console log', Panel: LogsTab },
  { id: 'commands', label: 'Commands', Panel: CommandsTab },
  { id: 'terminal', label: 'Terminal', Panel: TerminalTab },
  { id: 'services', label: 'Services', Panel: ServicesTab },
  { id: 'setup', label: 'Setup', Panel: SetupTab },
] as const;

export function MachinePage({ name, tab }: { name: string; tab: string | null }) {
  const machine = useInstance(name);
  const current = TABS.find((candidate) => candidate.id === tab) ?? TABS[0];

  useEffect(() => {
    if (machine.deleted) navigate('/', { replace: true });
    else if (machine.renamedTo && machine.renamedTo !== name) navigate(machinePath(machine.renamedTo, current.id), { replace: true });
  }, [machine.deleted, machine.renamedTo]);

  return (
    <section class="machine-page">
      <p class="breadcrumb">
        <Link href="/">All machines</Link>
      </p>
      <PageHeader title={name}>{machine.data && <StatusBadge status={machine.data.status} />}</PageHeader>
      <Loaded load={machine}>
        {(instance: Instance) => (
          <>
            <MachineActions instance={instance} tab={current.id} onChange={machine.set} />
            <nav class="tabs" aria-label="Machine sections">
              {TABS.map((candidate) => (
                <Link key={candidate.id} href={machinePath(name, candidate.id)} aria-current={candidate === current ? 'page' : undefined}>
                  {candidate.label}
                </Link>
              ))}
            </nav>
            <current.Panel instance={instance} />
          </>
        )}
      </Loaded>
    </section>
  );
}
