// The component catalogue: what the universal image holds, one row per component (its exact Debian
// version and installed size, read from the served image), filtered by category.
import { useState } from 'preact/hooks';
import type { ApiError } from '../../api';
import { Empty, ErrorNotice, Field, Loading } from '../../ui/kit';
import { Table } from '../../ui/table';
import { formatMib } from '../../machine/format';
import type { Component } from './data';

export function categoriesOf(components: Component[]): string[] {
  return [...new Set(components.map((component) => component.category))].sort();
}

export function Catalogue({ catalogue }: { catalogue: { data: Component[] | undefined; error: ApiError | null } }) {
  const [category, setCategory] = useState('');
  const components = catalogue.data;
  return (
    <section aria-labelledby="catalogue-heading">
      <div class="toolbar">
        <h2 id="catalogue-heading">Component catalogue</h2>
        {components && (
          <Field label="Category" id="catalogue-category">
            <select id="catalogue-category" value={category} onChange={(e) => setCategory(e.currentTarget.value)}>
              <option value="">All categories</option>
              {categoriesOf(components).map((each) => (
                <option key={each} value={each}>
                  {each}
                </option>
              ))}
            </select>
          </Field>
        )}
      </div>
      {components === undefined ? (
        catalogue.error ? <ErrorNotice error={catalogue.error} /> : <Loading label="Loading the catalogue…" />
      ) : components.length === 0 ? (
        <Empty>The served image has no components in the catalogue.</Empty>
      ) : (
        <CatalogueTable components={components.filter((component) => !category || component.category === category)} />
      )}
    </section>
  );
}

function CatalogueTable({ components }: { components: Component[] }) {
  return (
    <Table label="Component catalogue" class="catalogue" columns={['Component', 'Category', 'Version', 'Size', 'Requires']}>
      {components.map((component) => (
        <tr key={component.id}>
          <th scope="row">
            {component.name} <code>{component.id}</code>
            <span class="hint">{component.description}</span>
          </th>
          <td>{component.category}</td>
          <td>
            <code>{component.default_version}</code>
          </td>
          <td class="number">{formatMib(component.estimated_size_mib)}</td>
          <td>
            {component.requires.length === 0 ? (
              <span class="hint">—</span>
            ) : (
              <ul class="code-list">
                {component.requires.map((id) => (
                  <li key={id}>
                    <code>{id}</code>
                  </li>
                ))}
              </ul>
            )}
          </td>
        </tr>
      ))}
    </Table>
  );
}
