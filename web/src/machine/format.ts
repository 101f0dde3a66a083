// How machine figures read in the console: sizes from MiB, spans of seconds, lifetimes to choose from.

/** 512 MiB, 8 GiB, 1.5 TiB: the unit that keeps the number short. */
export function formatMib(mib: number): string {
  if (mib < 1024) return `${mib} MiB`;
  const gib = mib / 1024;
  if (gib < 1024) return `${trim(gib)} GiB`;
  return `${trim(gib / 1024)} TiB`;
}

/** 45 s, 5 min, 2 h, 7 days (whole units where they fit, else the next smaller one). */
export function formatSeconds(seconds: number): string {
  const units: [number, string, string][] = [[86_400, 'day', 'days'], [3_600, 'h', 'h'], [60, 'min', 'min']];
  for (const [size, one, many] of units) if (seconds >= size && seconds % size === 0) return `${seconds / size} ${seconds === size ? one : many}`;
  for (const [size, one, many] of units) if (seconds >= size) return `${trim(seconds / size)} ${seconds / size === 1 ? one : many}`;
  return `${seconds} s`;
}

function trim(value: number): string {
  return value.toFixed(1).replace(/\.0$/, '');
}

/** Lifetimes offered for a machine, its fork, or an extension (ttl_seconds: 60 to 2592000). */
export const LIFETIMES: { label: string; seconds: number }[] = [
  { label: '1 hour', seconds: 3_600 },
  { label: '4 hours', seconds: 4 * 3_600 },
  { label: '8 hours', seconds: 8 * 3_600 },
  { label: '1 day', seconds: 86_400 },
  { label: '7 days', seconds: 7 * 86_400 },
  { label: '30 days', seconds: 30 * 86_400 },
];

/** The instance name rule of the API (InstanceName), for inputs' `pattern`. */
export const INSTANCE_NAME_PATTERN = '[a-z][a-z0-9\\-]{0,61}[a-z0-9]';
export const INSTANCE_NAME_HINT = 'Lowercase letters, digits and hyphens; starts with a letter, 2 to 63 characters.';

export function machinePath(name: string, tab?: string | null): string {
  return `/console/machines/${encodeURIComponent(name)}${tab && tab !== 'overview' ? `?tab=${encodeURIComponent(tab)}` : ''}`;
}
