import type { Schemas } from '../../api';
import { StatusBadge } from '../../ui/kit';

/** A webhook's delivery health as a badge, with the failure count while it fails. */
export function WebhookHealth({ webhook }: { webhook: Schemas['WebhookEndpoint'] }) {
  const { state, consecutive_failures: failures } = webhook.health;
  return (
    <span class="health">
      <StatusBadge status={state} />
      {state === 'failing' && <span class="hint inline">{failures === 1 ? '1 failure in a row' : `${failures} failures in a row`}</span>}
    </span>
  );
}
