// Commands run in the machine (exec), newest first, refetched when the account's events say one
// started or ended; a running one can be interrupted.
import { api, ok, type Instance, type Schemas } from '../../api';
import { useAccountEvents } from '../../events';
import { Button, ConfirmButton, Empty, ErrorNotice, Loaded, StatusBadge, Time, useAction, useLoad } from '../../ui/kit';
import { Table } from '../../ui/table';
import { useCoalesced } from '../../machine/coalesce';

type Command = Schemas['CommandResponse'];

export function CommandsTab({ instance }: { instance: Instance }) {
  const name = instance.name;
  const commands = useLoad(async () => (await ok(api.GET('/v1/instances/{name}/commands', { params: { path: { name }, query: { limit: 50 } } }))).data, [name]);
  const refetch = useCoalesced(commands.reload);
  useAccountEvents((event) => {
    if (event.resource_type === 'command' && (event.data as { instance?: unknown }).instance === name) refetch();
  });
  const interrupt = useAction(async (command: Command) => {
    await ok(api.POST('/v1/instances/{name}/commands/{id}/interrupt', { params: { path: { name, id: command.id } }, body: { reason: 'interrupted from the console' } }));
    commands.reload();
  });
  return (
    <section aria-labelledby="commands-heading">
      <div class="toolbar">
        <h2 id="commands-heading">Commands</h2>
        <Button onClick={commands.reload} busy={commands.loading}>
          Refresh
        </Button>
      </div>
      <ErrorNotice error={interrupt.error} />
      <Loaded load={commands}>
        {(list) =>
          list.length === 0 ? (
            <Empty>
              No commands yet. Run one with <code>kiste exec {name} -- …</code> or POST /v1/instances/{name}/exec.
            </Empty>
          ) : (
            <Table label="Commands" columns={['Started', 'Status', 'Result', 'Took', 'Output', 'ID']} actions>
              {list.map((command) => (
                <tr key={command.id}>
                  <td>
                    <Time iso={command.started_at} />
                  </td>
                  <td>
                    <StatusBadge status={command.status} />
                  </td>
                  <td>{result(command)}</td>
                  <td>{command.duration_ms === null || command.duration_ms === undefined ? '—' : `${(command.duration_ms / 1000).toFixed(1)} s`}</td>
                  <td>{output(command)}</td>
                  <td>
                    <code>{command.id.slice(0, 8)}</code>
                  </td>
                  <td>
                    {command.status === 'running' &&
                      (command.cancel_requested_at ? (
                        <span class="hint">interrupting…</span>
                      ) : (
                        <ConfirmButton
                          label="Interrupt"
                          question={`Interrupt command ${command.id.slice(0, 8)}?`}
                          detail="The command is cancelled in the machine; its record stays."
                          confirmLabel="Interrupt command"
                          danger
                          busy={interrupt.busy}
                          onConfirm={() => void interrupt.run(command)}
                        />
                      ))}
                  </td>
                </tr>
              ))}
            </Table>
          )
        }
      </Loaded>
    </section>
  );
}

function result(command: Command): string {
  if (command.error_message) return command.error_message;
  const how = command.completion_status && command.completion_status !== 'exited' ? command.completion_status.replace(/_/g, ' ') : null;
  const code = command.exit_code != null ? `exit ${command.exit_code}` : command.signal ? `signal ${command.signal}` : null;
  return [code, how && code ? `(${how})` : how].filter(Boolean).join(' ') || '—';
}

function output(command: Command): string {
  if (command.stdout_bytes == null && command.stderr_bytes == null) return '—';
  return `${command.stdout_bytes ?? 0} B out, ${command.stderr_bytes ?? 0} B err`;
}
