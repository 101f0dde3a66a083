// The environment form, for a new environment and for the next version of one: repositories (URL,
// ref, checkout path, credentials file), variables, secret files read from local files (sent as
// content_base64; what was read is kept in memory only and never shown) and the setup script.
//
// Secret contents never come back from the API, so an edit cannot show or resend the current files:
// they are kept unless the person chooses to replace the set, and then `secret_files` is the whole
// new set (the PUT replaces a given field whole). Left alone, `secret_files` is not sent at all.
import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import { ApiError, type Schemas } from '../../api';
import { Button, ErrorNotice, Field, useAction } from '../../ui/kit';
import type { EnvironmentVersion } from './data';

export type EnvironmentBody = Schemas['UpdateEnvironmentRequest'];

/** The schema's bound: 48 KiB of base64, 36 KiB of file. */
const SECRET_MAX_BYTES = (49_152 / 4) * 3;
const VARIABLE_NAME_PATTERN = '[A-Za-z_][A-Za-z0-9_]*';
export const ENVIRONMENT_NAME_PATTERN = '[A-Za-z0-9][A-Za-z0-9._\\-]{0,62}';

interface RepositoryRow {
  key: number;
  url: string;
  ref: string;
  path: string;
  credentials: string;
}
interface VariableRow {
  key: number;
  name: string;
  value: string;
}
interface SecretRow {
  key: number;
  path: string;
  file: { name: string; size: number; base64: string } | null;
  problem: string | null;
}

let nextKey = 1;
const key = () => nextKey++;

export function EnvironmentForm(props: {
  /** The version an edit starts from; none for a new environment. */
  current?: EnvironmentVersion;
  /** Fields above the environment's content (the name of a new one). */
  children?: ComponentChildren;
  submitLabel: string;
  onSubmit(body: EnvironmentBody): Promise<unknown>;
  onCancel?(): void;
}) {
  const { current } = props;
  const editing = current !== undefined;
  const [repositories, setRepositories] = useState<RepositoryRow[]>(() =>
    (current?.repositories ?? []).map((repository) => ({ key: key(), url: repository.url, ref: repository.ref ?? '', path: repository.path ?? '', credentials: repository.credentials_file ?? '' })),
  );
  const [variables, setVariables] = useState<VariableRow[]>(() => Object.entries(current?.variables ?? {}).map(([name, value]) => ({ key: key(), name, value })));
  // An edit keeps the current secret files (null) until the person replaces the set.
  const [secrets, setSecrets] = useState<SecretRow[] | null>(editing ? null : []);
  const [script, setScript] = useState(current?.setup_script ?? '');
  const submit = useAction(async () => props.onSubmit(body()));

  const secretPaths = secrets === null ? (current?.secret_paths ?? []) : secrets.map((row) => row.path.trim()).filter(Boolean);

  const body = (): EnvironmentBody => {
    const names = variables.map((row) => row.name.trim()).filter(Boolean);
    const repeated = names.find((name, index) => names.indexOf(name) !== index);
    if (repeated) throw new ApiError(`The variable ${repeated} is given twice.`, 0, null, null, null);
    const unread = secrets?.find((row) => !row.file);
    if (unread) throw new ApiError(`Choose the file for the secret file ${unread.path.trim() || 'without a path'}.`, 0, null, 'Secret contents are never shown again, so every file of a changed set is chosen again.', null);
    const tooLarge = secrets?.find((row) => row.problem);
    if (tooLarge) throw new ApiError(tooLarge.problem!, 0, null, null, null);
    return {
      repositories: repositories.map((row) => ({
        url: row.url.trim(),
        ref: row.ref.trim() || null,
        path: row.path.trim() || null,
        credentials_file: row.credentials || null,
      })),
      variables: Object.fromEntries(variables.filter((row) => row.name.trim()).map((row) => [row.name.trim(), row.value])),
      setup_script: script,
      ...(secrets === null ? {} : { secret_files: secrets.map((row) => ({ path: row.path.trim(), content_base64: row.file!.base64 })) }),
    };
  };

  return (
    <form
      class="environment-form"
      onSubmit={(event) => {
        event.preventDefault();
        void submit.run();
      }}
    >
      {props.children}
      <RepositoriesField rows={repositories} onChange={setRepositories} secretPaths={secretPaths} />
      <VariablesField rows={variables} onChange={setVariables} />
      <SecretFilesField rows={secrets} current={current?.secret_paths ?? []} editing={editing} onChange={setSecrets} />
      <Field label="Setup script" id="environment-script" hint="Run with bash -l after the clones, in the first repository's checkout (else /root). Its output is on the machine's Setup tab.">
        <textarea id="environment-script" rows={8} maxLength={32_768} spellcheck={false} placeholder={'#!/bin/bash\nnpm ci'} aria-describedby="environment-script-hint" value={script} onInput={(e) => setScript(e.currentTarget.value)} />
      </Field>
      <ErrorNotice error={submit.error} />
      <div class="actions">
        <Button type="submit" variant="primary" busy={submit.busy}>
          {props.submitLabel}
        </Button>
        {props.onCancel && <Button onClick={props.onCancel}>Cancel</Button>}
      </div>
    </form>
  );
}

function RepositoriesField({ rows, onChange, secretPaths }: { rows: RepositoryRow[]; onChange(rows: RepositoryRow[]): void; secretPaths: string[] }) {
  const change = (row: RepositoryRow, patch: Partial<RepositoryRow>) => onChange(rows.map((each) => (each.key === row.key ? { ...each, ...patch } : each)));
  return (
    <fieldset class="rows">
      <legend>Repositories</legend>
      <p class="hint">Cloned into every machine created with the environment, in this order. URLs never carry credentials: name a secret file with them instead.</p>
      {rows.map((row, index) => {
        const id = `repository-${row.key}`;
        const options = row.credentials && !secretPaths.includes(row.credentials) ? [...secretPaths, row.credentials] : secretPaths;
        return (
          <fieldset key={row.key} class="row-group" aria-label={`Repository ${index + 1}`}>
            <div class="form-row">
              <Field label="URL" id={`${id}-url`}>
                <input id={`${id}-url`} required maxLength={2048} spellcheck={false} placeholder="https://git.example.com/team/app.git" value={row.url} onInput={(e) => change(row, { url: e.currentTarget.value })} />
              </Field>
              <Field label="Ref" id={`${id}-ref`}>
                <input id={`${id}-ref`} maxLength={255} spellcheck={false} placeholder="default branch" value={row.ref} onInput={(e) => change(row, { ref: e.currentTarget.value })} />
              </Field>
            </div>
            <div class="form-row">
              <Field label="Checkout path" id={`${id}-path`}>
                <input id={`${id}-path`} maxLength={1024} spellcheck={false} placeholder="/root/<repository name>" value={row.path} onInput={(e) => change(row, { path: e.currentTarget.value })} />
              </Field>
              <Field label="Credentials file" id={`${id}-credentials`}>
                <select id={`${id}-credentials`} value={row.credentials} onChange={(e) => change(row, { credentials: e.currentTarget.value })}>
                  <option value="">None (a public repository)</option>
                  {options.map((path) => (
                    <option key={path} value={path}>
                      {path}
                    </option>
                  ))}
                </select>
              </Field>
            </div>
            <Button onClick={() => onChange(rows.filter((each) => each.key !== row.key))} aria-label={`Remove repository ${index + 1}`}>
              Remove
            </Button>
          </fieldset>
        );
      })}
      <Button onClick={() => onChange([...rows, { key: key(), url: '', ref: '', path: '', credentials: '' }])} disabled={rows.length >= 20}>
        Add repository
      </Button>
    </fieldset>
  );
}

function VariablesField({ rows, onChange }: { rows: VariableRow[]; onChange(rows: VariableRow[]): void }) {
  const change = (row: VariableRow, patch: Partial<VariableRow>) => onChange(rows.map((each) => (each.key === row.key ? { ...each, ...patch } : each)));
  return (
    <fieldset class="rows">
      <legend>Variables</legend>
      <p class="hint">Set in every login shell and every command run in the machine. Not secret: they are shown here and in the API.</p>
      {rows.length > 0 && (
        <div class="variable-rows">
          {rows.map((row, index) => (
            <div key={row.key} class="variable-row" role="group" aria-label={`Variable ${index + 1}`}>
              <input aria-label={`Variable ${index + 1} name`} required maxLength={256} pattern={VARIABLE_NAME_PATTERN} spellcheck={false} placeholder="NAME" value={row.name} onInput={(e) => change(row, { name: e.currentTarget.value })} />
              <input aria-label={`Variable ${index + 1} value`} maxLength={8192} spellcheck={false} placeholder="value" value={row.value} onInput={(e) => change(row, { value: e.currentTarget.value })} />
              <Button onClick={() => onChange(rows.filter((each) => each.key !== row.key))} aria-label={`Remove variable ${index + 1}`}>
                Remove
              </Button>
            </div>
          ))}
        </div>
      )}
      <Button onClick={() => onChange([...rows, { key: key(), name: '', value: '' }])} disabled={rows.length >= 200}>
        Add variable
      </Button>
    </fieldset>
  );
}

function SecretFilesField({ rows, current, editing, onChange }: { rows: SecretRow[] | null; current: string[]; editing: boolean; onChange(rows: SecretRow[] | null): void }) {
  if (rows === null) {
    return (
      <fieldset class="rows">
        <legend>Secret files</legend>
        {current.length === 0 ? (
          <p class="hint">None.</p>
        ) : (
          <>
            <ul class="secret-paths">
              {current.map((path) => (
                <li key={path}>
                  <code>{path}</code>
                </li>
              ))}
            </ul>
            <p class="hint">Kept as they are in the new version (their contents are never shown).</p>
          </>
        )}
        <Button onClick={() => onChange(current.length === 0 ? [newSecret('')] : current.map((path) => newSecret(path)))}>
          {current.length === 0 ? 'Add secret file' : 'Replace secret files'}
        </Button>
      </fieldset>
    );
  }
  const change = (row: SecretRow, patch: Partial<SecretRow>) => onChange(rows.map((each) => (each.key === row.key ? { ...each, ...patch } : each)));
  return (
    <fieldset class="rows">
      <legend>Secret files</legend>
      <p class="hint">
        Read from files on this computer and sealed by the service; written with mode 0600 into machines and never shown again. At most 36 KiB each.
      </p>
      {editing && current.length > 0 && (
        <div class="notice info">
          The new version gets exactly these files: choose each one's file again (the current contents cannot be read back).{' '}
          <Button onClick={() => onChange(null)}>Keep the current secret files</Button>
        </div>
      )}
      {rows.map((row, index) => (
        <SecretFileRow key={row.key} row={row} index={index} onChange={(patch) => change(row, patch)} onRemove={() => onChange(rows.filter((each) => each.key !== row.key))} />
      ))}
      <Button onClick={() => onChange([...rows, newSecret('')])} disabled={rows.length >= 20}>
        Add secret file
      </Button>
    </fieldset>
  );
}

function newSecret(path: string): SecretRow {
  return { key: key(), path, file: null, problem: null };
}

function SecretFileRow({ row, index, onChange, onRemove }: { row: SecretRow; index: number; onChange(patch: Partial<SecretRow>): void; onRemove(): void }) {
  const id = `secret-${row.key}`;
  const read = async (file: File | undefined) => {
    if (!file) return onChange({ file: null, problem: null });
    if (file.size > SECRET_MAX_BYTES) return onChange({ file: null, problem: `${file.name} is ${Math.ceil(file.size / 1024)} KiB: a secret file holds at most 36 KiB.` });
    const base64 = toBase64(new Uint8Array(await file.arrayBuffer()));
    // The content stays in this row's state (sent with the form), never in the page: only the name and size are shown.
    onChange({ file: { name: file.name, size: file.size, base64 }, problem: null, ...(row.path.trim() ? {} : { path: `/root/${file.name}` }) });
  };
  return (
    <fieldset class="row-group" aria-label={`Secret file ${index + 1}`}>
      <div class="form-row">
        <Field label="Path in the machine" id={`${id}-path`}>
          <input id={`${id}-path`} required maxLength={1024} spellcheck={false} placeholder="/root/.git-credentials" value={row.path} onInput={(e) => onChange({ path: e.currentTarget.value })} />
        </Field>
        <Field label="File" id={`${id}-file`} hint={row.file ? `${row.file.name}, ${formatBytes(row.file.size)} read` : 'Not chosen yet.'}>
          <input id={`${id}-file`} type="file" aria-describedby={`${id}-file-hint`} onChange={(e) => void read(e.currentTarget.files?.[0])} />
        </Field>
      </div>
      {row.problem && (
        <p class="hint error-text" role="alert">
          {row.problem}
        </p>
      )}
      <Button onClick={onRemove} aria-label={`Remove secret file ${index + 1}`}>
        Remove
      </Button>
    </fieldset>
  );
}

function toBase64(bytes: Uint8Array): string {
  let binary = '';
  for (let at = 0; at < bytes.length; at += 0x8000) binary += String.fromCharCode(...bytes.subarray(at, at + 0x8000));
  return btoa(binary);
}

function formatBytes(bytes: number): string {
  return bytes < 1024 ? `${bytes} bytes` : `${(bytes / 1024).toFixed(1)} KiB`;
}
