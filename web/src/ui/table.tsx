// The console's data tables. Each page keeps its own row cells; what every table repeats is here: a
// wrapper that scrolls sideways on a narrow screen (rather than the page), and the row of column titles.
import type { ComponentChildren } from 'preact';

export function Table({ label, columns, actions, class: className, children }: {
  /** The table's accessible name, where it has one (screen readers and tests find the table by it). */
  label?: string;
  columns: string[];
  /** Adds a last column for the rows' buttons, titled for screen readers only. */
  actions?: boolean;
  class?: string;
  /** The rows: one `<tr>` each. */
  children: ComponentChildren;
}) {
  return (
    <div class="table-scroll">
      <table class={className} aria-label={label}>
        <thead>
          <tr>
            {columns.map((column) => (
              <th key={column} scope="col">
                {column}
              </th>
            ))}
            {actions && (
              <th scope="col">
                <span class="visually-hidden">Actions</span>
              </th>
            )}
          </tr>
        </thead>
        <tbody>{children}</tbody>
      </table>
    </div>
  );
}
