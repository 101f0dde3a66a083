// One environment version as it was published: repositories, variables, the paths of its secret files
// (their contents are never answered by the API, so never shown) and the setup script.
import { Table } from '../../ui/table';
import type { EnvironmentVersion } from './data';

export function VersionView({ version, headingLevel = 3 }: { version: EnvironmentVersion; headingLevel?: 3 | 4 }) {
  const Heading = headingLevel === 3 ? 'h3' : 'h4';
  const prefix = `${Heading}-v${version.version}`;
  const variables = Object.entries(version.variables);
  return (
    <div class="version-view">
      <Heading id={`${prefix}-repositories`}>Repositories</Heading>
      {version.repositories.length === 0 ? (
        <p class="hint">None.</p>
      ) : (
        <Table label={`Repositories of version ${version.version}`} columns={['URL', 'Ref', 'Checkout path', 'Credentials file']}>
          {version.repositories.map((repository, index) => (
            <tr key={index}>
              <th scope="row">
                <code>{repository.url}</code>
              </th>
              <td>{repository.ref ? <code>{repository.ref}</code> : <span class="hint">default branch</span>}</td>
              <td>{repository.path ? <code>{repository.path}</code> : <span class="hint">/root/&lt;name&gt;</span>}</td>
              <td>{repository.credentials_file ? <code>{repository.credentials_file}</code> : <span class="hint">none</span>}</td>
            </tr>
          ))}
        </Table>
      )}
      <Heading id={`${prefix}-variables`}>Variables</Heading>
      {variables.length === 0 ? (
        <p class="hint">None.</p>
      ) : (
        <Table label={`Variables of version ${version.version}`} columns={['Name', 'Value']}>
          {variables.map(([name, value]) => (
            <tr key={name}>
              <th scope="row">
                <code>{name}</code>
              </th>
              <td>
                <code class="value">{value}</code>
              </td>
            </tr>
          ))}
        </Table>
      )}
      <Heading id={`${prefix}-secrets`}>Secret files</Heading>
      {version.secret_paths.length === 0 ? (
        <p class="hint">None.</p>
      ) : (
        <>
          <ul class="secret-paths" aria-labelledby={`${prefix}-secrets`}>
            {version.secret_paths.map((path) => (
              <li key={path}>
                <code>{path}</code>
              </li>
            ))}
          </ul>
          <p class="hint">Contents are sealed and never shown; each file is written with mode 0600 into machines created with this version.</p>
        </>
      )}
      <Heading id={`${prefix}-script`}>Setup script</Heading>
      {version.setup_script ? (
        <pre class="script" tabIndex={0} aria-labelledby={`${prefix}-script`}>
          {version.setup_script}
        </pre>
      ) : (
        <p class="hint">None.</p>
      )}
    </div>
  );
}

/** "2 repositories, 1 variable, no secret files, a setup script": a version in one line. */
export function summarizeVersion(version: EnvironmentVersion): string {
  const count = (n: number, one: string, many: string) => (n === 0 ? `no ${many}` : `${n} ${n === 1 ? one : many}`);
  return [
    count(version.repositories.length, 'repository', 'repositories'),
    count(Object.keys(version.variables).length, 'variable', 'variables'),
    count(version.secret_paths.length, 'secret file', 'secret files'),
    version.setup_script ? 'a setup script' : 'no setup script',
  ].join(', ');
}
