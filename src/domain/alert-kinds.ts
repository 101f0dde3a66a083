// The one list of alert kinds: what each means, how it is titled in the settings, and whether it is
// e-mailed when the account has not chosen. openapi.yaml's AlertKind names the same set (a unit
// test checks it); every alert is raised through store/alerts.raiseAlert with one of these kinds.

export interface AlertKindDefinition {
  kind: string;
  /** Shown beside the e-mail switch in the settings. */
  title: string;
  /** When alerts of this kind are raised. */
  description: string;
  /** Whether alerts of this kind are e-mailed until the account changes it. */
  emailByDefault: boolean;
}

export const ALERT_KINDS = [
  {
    kind: 'webhook_created',
    title: 'Webhook created',
    description: 'A webhook endpoint was added to the account: from now on it receives account events.',
    emailByDefault: true,
  },
  {
    kind: 'disk_almost_full',
    title: 'Disk almost full',
    description: 'The disk of a running machine is 90 % full or more. Raised once per occurrence: again only after usage fell below 85 %.',
    emailByDefault: true,
  },
  {
    kind: 'webhook_failing',
    title: 'Webhook failing',
    description: 'Deliveries to a webhook endpoint keep failing (or the receiver asked to stop with 410).',
    emailByDefault: true,
  },
  {
    kind: 'instance_error',
    title: 'Machine error',
    description: 'A machine entered the error state because an operation on it (create, start, stop, …) failed.',
    emailByDefault: true,
  },
  {
    kind: 'api_key_expiring',
    title: 'API key expiring',
    description: 'An API key made for more than seven days expires within seven days. Raised once per key.',
    emailByDefault: true,
  },
  {
    kind: 'new_sign_in',
    title: 'New sign-in',
    description: 'Someone signed in with the password from a browser this account had not used before (not on the first sign-in).',
    emailByDefault: true,
  },
] as const satisfies readonly AlertKindDefinition[];

export type AlertKind = (typeof ALERT_KINDS)[number]['kind'];

const BY_KIND = new Map<string, AlertKindDefinition>(ALERT_KINDS.map((definition) => [definition.kind, definition]));

export function isAlertKind(kind: string): kind is AlertKind {
  return BY_KIND.has(kind);
}

export function alertKind(kind: AlertKind): AlertKindDefinition {
  return BY_KIND.get(kind)!;
}
