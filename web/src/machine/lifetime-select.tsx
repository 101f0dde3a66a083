// A choice of lifetime (ttl_seconds) as a select; the value is seconds as a string, '' for none.
import { LIFETIMES } from './format';

export function LifetimeSelect(props: { id: string; value: string; onChange(value: string): void; noneLabel?: string; describedBy?: string }) {
  return (
    <select id={props.id} value={props.value} aria-describedby={props.describedBy} onChange={(e) => props.onChange(e.currentTarget.value)}>
      {props.noneLabel && <option value="">{props.noneLabel}</option>}
      {LIFETIMES.map((option) => (
        <option key={option.seconds} value={String(option.seconds)}>
          {option.label}
        </option>
      ))}
    </select>
  );
}
