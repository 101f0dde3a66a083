// Device keys: the SSH public keys every machine of the account trusts. The API refuses to add one from
// a browser session (a stolen console cookie must not be able to plant an SSH key), so the page lists
// and deletes, and shows the CLI command that adds.
import { api, ok, type Schemas } from '../api';
import { useRefreshOn } from '../ui/live';
import { ConfirmAction } from '../ui/confirm-action';
import { CopyButton, PageHeader, Time } from '../ui/kit';
import { ListView, usePagedList } from '../ui/paged-list';
import { Table } from '../ui/table';

type DeviceKey = Schemas['DeviceKey'];

const ADD_COMMAND = 'kiste device-keys add <name> <public-key-file>';
const ADD_EXAMPLE = 'kiste device-keys add laptop ~/.ssh/id_ed25519.pub';

export function DeviceKeysPage() {
  const keys = usePagedList((startingAfter) => ok(api.GET('/v1/device-keys', { params: { query: { starting_after: startingAfter } } })), []);
  useRefreshOn('device_key', keys.reload);
  return (
    <section>
      <PageHeader title="Device keys" />
      <p class="lead">
        Device keys are SSH public keys. Every machine of your account accepts them, from its next start or SSH tunnel.
      </p>
      <div class="notice info" role="note" aria-labelledby="add-device-key">
        <strong id="add-device-key">Add a device key with the kiste CLI</strong>
        <p>
          The console cannot add device keys: kiste takes new ones only from a signed-in CLI or an API key, so that a browser
          session alone can never plant an SSH key. Run
        </p>
        <div class="secret">
          <code>{ADD_COMMAND}</code>
        </div>
        <p>For example:</p>
        <div class="secret">
          <code>{ADD_EXAMPLE}</code>
          <CopyButton value={ADD_EXAMPLE} label="Copy command" />
        </div>
      </div>
      <h2>Your device keys</h2>
      <ListView list={keys} empty="No device keys yet.">
        {(items) => (
          <Table columns={['Name', 'Fingerprint', 'Added', 'Last used']} actions>
            {items.map((key) => (
              <DeviceKeyRow key={key.id} deviceKey={key} onDeleted={() => keys.update((rows) => rows.filter((row) => row.id !== key.id))} />
            ))}
          </Table>
        )}
      </ListView>
    </section>
  );
}

function DeviceKeyRow({ deviceKey, onDeleted }: { deviceKey: DeviceKey; onDeleted(): void }) {
  return (
    <tr>
      <th scope="row">{deviceKey.name}</th>
      <td>
        <code title={deviceKey.public_key}>{deviceKey.fingerprint}</code>
      </td>
      <td>
        <Time iso={deviceKey.created_at} />
      </td>
      <td>
        <Time iso={deviceKey.last_used_at} empty="never" />
      </td>
      <td class="row-actions">
        <ConfirmAction
          label="Delete"
          question={`Delete the device key “${deviceKey.name}”?`}
          detail="Machines stop accepting it at their next start or SSH tunnel."
          confirmLabel="Delete key"
          danger
          action={async () => {
            await ok(api.DELETE('/v1/device-keys/{id}', { params: { path: { id: deviceKey.id } } }));
            onDeleted();
          }}
        />
      </td>
    </tr>
  );
}
