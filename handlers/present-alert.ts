// Alert rows and e-mail settings → AlertResponse and AlertPreferencesResponse.
import type { components } from '../src/generated/api';
import type { AlertPreferences } from '../src/domain/alerts';
import type { Alert } from '../src/store/alerts';
import { iso } from './present';

type Schemas = components['schemas'];

export function presentAlert(alert: Alert): Schemas['AlertResponse'] {
  return {
    id: alert.id,
    object: 'alert',
    kind: alert.kind as Schemas['AlertKind'],
    title: alert.title,
    detail: alert.detail,
    created_at: iso(alert.createdAt),
    acknowledged_at: iso(alert.acknowledgedAt),
    // emailedAt marks outbox steps until the e-mail is sent (store/alerts.ts): shown only once sent.
    emailed_at: alert.emailState === 'sent' ? iso(alert.emailedAt) : null,
    resource_type: alert.resourceType,
    resource_id: alert.resourceId,
  };
}

export function presentAlertPreferences(preferences: AlertPreferences): Schemas['AlertPreferencesResponse'] {
  return {
    object: 'alert_preferences',
    email: preferences.email,
    email_delivery: preferences.emailDelivery,
    data: preferences.kinds.map((entry) => ({ kind: entry.kind, enabled: entry.enabled, title: entry.title, description: entry.description })),
  };
}
