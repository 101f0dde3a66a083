// Which event types a webhook receives: one checkbox per type (named by the type, as deliveries and
// the API call it), grouped by what the events are about.
import { Button } from '../../ui/kit';
import { EVENT_TYPES, eventTypeGroups, resourceLabel, type EventType } from './event-types';

export function EventTypesField({ value, onChange, idPrefix }: { value: EventType[]; onChange(types: EventType[]): void; idPrefix: string }) {
  const chosen = new Set(value);
  const toggle = (type: EventType, on: boolean) => onChange(EVENT_TYPES.filter((each) => (each === type ? on : chosen.has(each))));
  return (
    <fieldset class="event-types">
      <legend>Event types</legend>
      <div class="actions">
        <Button onClick={() => onChange([...EVENT_TYPES])}>Select all event types</Button>
        <Button onClick={() => onChange([])} disabled={value.length === 0}>
          Clear event types
        </Button>
        <span class="hint" aria-live="polite">
          {value.length} of {EVENT_TYPES.length} chosen
        </span>
      </div>
      <div class="event-groups">
        {eventTypeGroups().map((group) => (
          <fieldset key={group.resource} class="event-group">
            <legend>{resourceLabel(group.resource)}</legend>
            {group.types.map((type) => (
              <label key={type} class="choice" for={`${idPrefix}-${type}`}>
                <input id={`${idPrefix}-${type}`} type="checkbox" checked={chosen.has(type)} onChange={(e) => toggle(type, e.currentTarget.checked)} />
                <code>{type}</code>
              </label>
            ))}
          </fieldset>
        ))}
      </div>
    </fieldset>
  );
}
