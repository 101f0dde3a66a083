// Environments: what a machine gets at create besides its image — repositories cloned, variables,
// secret files and a setup script. The list with each one's current version, and the form that makes
// one; each environment's page (environments/environment-page.tsx) shows and edits it. Kept current
// by environment events.
import { useState } from 'preact/hooks';
import { api, ok } from '../api';
import { Link, navigate } from '../router';
import { Button, Field, PageHeader, Time, useLoad } from '../ui/kit';
import { useRefreshOn } from '../ui/live';
import { ListView } from '../ui/paged-list';
import { Table } from '../ui/table';
import { environmentPath, fetchEnvironments, type Environment } from './environments/data';
import { EnvironmentForm, ENVIRONMENT_NAME_PATTERN } from './environments/environment-form';
export { EnvironmentPage } from './environments/environment-page';

export function EnvironmentsPage() {
  const environments = useLoad(fetchEnvironments, []);
  const [creating, setCreating] = useState(false);
  useRefreshOn('environment', environments.reload);
  const list = { items: environments.data, error: environments.error, hasMore: false, loadingMore: false, loadMore: () => undefined };
  return (
    <section class="environments-page">
      <PageHeader title="Environments">
        {!creating && (
          <Button variant="primary" onClick={() => setCreating(true)}>
            New environment
          </Button>
        )}
      </PageHeader>
      <p class="lead">
        An environment is applied to a machine when you create it: its repositories are cloned, its variables set, its secret
        files written and its setup script run. Every change publishes a new version; a machine keeps the version it was
        created with.
      </p>
      {creating && <CreateEnvironment onCancel={() => setCreating(false)} />}
      <h2>Your environments</h2>
      <ListView list={list} empty="No environments yet." loadingLabel="Loading environments…">
        {(items) => <EnvironmentTable environments={items} />}
      </ListView>
    </section>
  );
}

function EnvironmentTable({ environments }: { environments: Environment[] }) {
  return (
    <Table label="Environments" columns={['Name', 'Current version', 'Updated', 'Created']}>
      {environments.map((environment) => (
        <tr key={environment.id}>
          <th scope="row">
            <Link href={environmentPath(environment.name)}>{environment.name}</Link>
          </th>
          <td>Version {environment.current_version}</td>
          <td>
            <Time iso={environment.updated_at} />
          </td>
          <td>
            <Time iso={environment.created_at} />
          </td>
        </tr>
      ))}
    </Table>
  );
}

function CreateEnvironment({ onCancel }: { onCancel(): void }) {
  const [name, setName] = useState('');
  return (
    <section aria-labelledby="create-environment" class="panel">
      <h2 id="create-environment">New environment</h2>
      <EnvironmentForm
        submitLabel="Create environment"
        onCancel={onCancel}
        onSubmit={async (body) => {
          const created = await ok(api.POST('/v1/environments', { body: { name: name.trim(), ...body } }));
          navigate(environmentPath(created.name));
        }}
      >
        <Field label="Environment name" id="environment-name" hint="Letters, digits, dots, dashes and underscores; up to 63 characters. It cannot be changed later.">
          <input id="environment-name" required maxLength={63} pattern={ENVIRONMENT_NAME_PATTERN} autoComplete="off" spellcheck={false} aria-describedby="environment-name-hint" value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </Field>
      </EnvironmentForm>
    </section>
  );
}
