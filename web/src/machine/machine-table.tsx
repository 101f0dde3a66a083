// The account's machines as a table: each name links to the machine's page.
import type { Instance } from '../api';
import { Link } from '../router';
import { StatusBadge, Time } from '../ui/kit';
import { Table } from '../ui/table';
import { formatMib, machinePath } from './format';

export function MachineTable({ machines }: { machines: Instance[] }) {
  return (
    <Table class="machine-list" label="Machines" columns={['Name', 'Status', 'vCPUs', 'Memory', 'Disk', 'Stops', 'Created']}>
      {machines.map((machine) => (
        <tr key={machine.id}>
          <td>
            <Link href={machinePath(machine.name)}>{machine.name}</Link>
            {machine.update_available && <span class="badge subtle">update</span>}
          </td>
          <td>
            <StatusBadge status={machine.status} />
          </td>
          <td>{machine.vcpu}</td>
          <td>{formatMib(machine.memory_mib)}</td>
          <td>{formatMib(machine.disk_mib)}</td>
          <td>
            <Time iso={machine.expires_at} empty="never" />
          </td>
          <td>
            <Time iso={machine.created_at} />
          </td>
        </tr>
      ))}
    </Table>
  );
}
