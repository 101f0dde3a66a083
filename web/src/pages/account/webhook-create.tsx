// The form that adds a webhook endpoint: a name, the URL and the event types. The signing secret comes
// back once, so the page shows it with a copy button until the user is done.
import { useState } from 'preact/hooks';
import { api, ok, type Schemas } from '../../api';
import { Button, ErrorNotice, Field, ShownOnce, useAction } from '../../ui/kit';
import type { EventType } from './event-types';
import { EventTypesField } from './webhook-events-field';

export function CreateWebhookForm({ onCreated }: { onCreated(webhook: Schemas['WebhookEndpoint']): void }) {
  const [name, setName] = useState('');
  const [url, setUrl] = useState('');
  const [events, setEvents] = useState<EventType[]>([]);
  const [secret, setSecret] = useState<string | null>(null);
  const create = useAction(async () => {
    const answer = await ok(api.POST('/v1/webhooks', { body: { name: name.trim(), url: url.trim(), events } }));
    setSecret(answer.secret);
    setName('');
    setUrl('');
    setEvents([]);
    onCreated(answer.data);
  });

  return (
    <section aria-labelledby="create-webhook" class="panel">
      <h2 id="create-webhook">Add a webhook</h2>
      <ShownOnce label="Signing secret" value={secret} returnFocusTo="webhook-name" onDone={() => setSecret(null)} />
      <form
        onSubmit={(event) => {
          event.preventDefault();
          void create.run();
        }}
      >
        <div class="form-row">
          <Field label="Name" id="webhook-name">
            <input id="webhook-name" required maxLength={100} value={name} onInput={(e) => setName(e.currentTarget.value)} />
          </Field>
          <Field label="URL" id="webhook-url" hint="HTTPS on port 443, reachable on the public internet.">
            <input id="webhook-url" type="url" required maxLength={2048} placeholder="https://example.com/kiste-events" aria-describedby="webhook-url-hint" value={url} onInput={(e) => setUrl(e.currentTarget.value)} />
          </Field>
        </div>
        <EventTypesField idPrefix="webhook-event" value={events} onChange={setEvents} />
        <ErrorNotice error={create.error} />
        <Button type="submit" variant="primary" busy={create.busy} disabled={events.length === 0} aria-describedby={events.length === 0 ? 'webhook-needs-events' : undefined}>
          Create webhook
        </Button>
        {events.length === 0 && (
          <span class="hint inline" id="webhook-needs-events">
            Choose at least one event type.
          </span>
        )}
      </form>
    </section>
  );
}
