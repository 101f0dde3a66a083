// The form that makes an API key: a name and a lifetime (the API takes 300 seconds to one year). The
// key value comes back once, so the page shows it with a copy button until the user is done.
import { useState } from 'preact/hooks';
import { api, ok, type Schemas } from '../../api';
import { Button, ErrorNotice, Field, ShownOnce, useAction } from '../../ui/kit';

const DAY = 86_400;
const LIFETIMES: { label: string; seconds: number }[] = [
  { label: '1 day', seconds: DAY },
  { label: '7 days', seconds: 7 * DAY },
  { label: '30 days', seconds: 30 * DAY },
  { label: '90 days', seconds: 90 * DAY },
  { label: '1 year', seconds: 365 * DAY },
];
const DEFAULT_LIFETIME = 30 * DAY; // what `kiste keys create` uses too

export function CreateApiKeyForm({ onCreated }: { onCreated(key: Schemas['ApiTokenResponse']): void }) {
  const [label, setLabel] = useState('');
  const [lifetime, setLifetime] = useState(DEFAULT_LIFETIME);
  const [created, setCreated] = useState<string | null>(null);
  const create = useAction(async () => {
    const answer = await ok(api.POST('/v1/api-tokens', { body: { label: label.trim(), expires_in_seconds: lifetime } }));
    setCreated(answer.token);
    setLabel('');
    onCreated(answer.data);
  });

  return (
    <section aria-labelledby="create-api-key" class="panel">
      <h2 id="create-api-key">Create an API key</h2>
      <ShownOnce label="New API key" value={created} returnFocusTo="api-key-name" onDone={() => setCreated(null)} />
      <form
        class="inline-form"
        onSubmit={(event) => {
          event.preventDefault();
          void create.run();
        }}
      >
        <Field label="Name" id="api-key-name" hint="What uses the key, e.g. “deploy script”.">
          <input id="api-key-name" required maxLength={100} aria-describedby="api-key-name-hint" value={label} onInput={(e) => setLabel(e.currentTarget.value)} />
        </Field>
        <Field label="Lifetime" id="api-key-lifetime">
          <select id="api-key-lifetime" value={lifetime} onChange={(e) => setLifetime(Number(e.currentTarget.value))}>
            {LIFETIMES.map((option) => (
              <option key={option.seconds} value={option.seconds}>
                {option.label}
              </option>
            ))}
          </select>
        </Field>
        <Button type="submit" variant="primary" busy={create.busy}>
          Create API key
        </Button>
      </form>
      <ErrorNotice error={create.error} />
    </section>
  );
}
