// API keys: the account's keys (metadata only: the value was shown once, at creation), a form to make
// one and a revoke button on each active key.
import { api, ok, type Schemas } from '../api';
import { useRefreshOn } from '../ui/live';
import { ConfirmAction } from '../ui/confirm-action';
import { PageHeader, StatusBadge, Time } from '../ui/kit';
import { ListView, onePage, usePagedList, type PagedList } from '../ui/paged-list';
import { Table } from '../ui/table';
import { CreateApiKeyForm } from './account/api-key-create';

type ApiKey = Schemas['ApiTokenResponse'];

export function ApiKeysPage() {
  const keys = usePagedList(() => onePage(ok(api.GET('/v1/api-tokens'))), []);
  useRefreshOn('api_token', keys.reload);
  return (
    <section>
      <PageHeader title="API keys" />
      <p class="lead">
        API keys let scripts and other programs use the kiste API as you (<code>Authorization: Bearer &lt;key&gt;</code>). A
        key cannot make other keys or delete the account; at most 10 are active at a time.
      </p>
      <CreateApiKeyForm onCreated={(key) => keys.update((items) => [...items.filter((item) => item.id !== key.id), key])} />
      <h2>Your API keys</h2>
      <ListView list={keys} empty="No API keys yet.">
        {(items) => <ApiKeyTable keys={items} list={keys} />}
      </ListView>
    </section>
  );
}

function ApiKeyTable({ keys, list }: { keys: ApiKey[]; list: PagedList<ApiKey> }) {
  return (
    <Table columns={['Name', 'Key', 'State', 'Created', 'Expires', 'Last used']} actions>
      {keys.map((key) => (
        <ApiKeyRow key={key.id} apiKey={key} onRevoked={(revoked) => list.update((items) => items.map((item) => (item.id === revoked.id ? revoked : item)))} />
      ))}
    </Table>
  );
}

function keyState(key: ApiKey): 'active' | 'revoked' | 'expired' {
  if (key.revoked_at) return 'revoked';
  return new Date(key.expires_at).getTime() <= Date.now() ? 'expired' : 'active';
}

function ApiKeyRow({ apiKey, onRevoked }: { apiKey: ApiKey; onRevoked(key: ApiKey): void }) {
  const state = keyState(apiKey);
  return (
    <tr>
      <th scope="row">{apiKey.label}</th>
      <td>
        <code>{apiKey.token_hint}</code>
      </td>
      <td>
        <StatusBadge status={state} />
      </td>
      <td>
        <Time iso={apiKey.created_at} />
      </td>
      <td>
        <Time iso={apiKey.expires_at} />
      </td>
      <td>
        <Time iso={apiKey.last_used_at} empty="never" />
      </td>
      <td class="row-actions">
        {state === 'active' && (
          <ConfirmAction
            label="Revoke"
            question={`Revoke the API key “${apiKey.label}”?`}
            detail="Programs using it are refused from now on. This cannot be undone."
            confirmLabel="Revoke key"
            danger
            action={async () => {
              await ok(api.DELETE('/v1/api-tokens/{id}', { params: { path: { id: apiKey.id } } }));
              onRevoked({ ...apiKey, revoked_at: new Date().toISOString() });
            }}
          />
        )}
      </td>
    </tr>
  );
}
