// Domain records → API shapes (snake_case, RFC 3339 times). One function per shape.
import type { components } from '../src/generated/api';
import type { Account } from '../src/store/accounts';
import type { ApiToken } from '../src/store/api-tokens';
import type { AccountDeletion } from '../src/store/deletions';
import type { DeviceKey } from '../src/store/device-keys';
import type { Session } from '../src/store/sessions';
import type { ServiceAccess, ServiceView } from '../src/domain/hosted-services';

type Schemas = components['schemas'];

export function iso(date: Date): string;
export function iso(date: Date | null): string | null;
export function iso(date: Date | null): string | null {
  return date ? date.toISOString() : null;
}

export function presentUser(account: Account): Schemas['User'] {
  return {
    id: account.id,
    object: 'user',
    email: account.email,
    name: account.name,
    created_at: iso(account.createdAt),
    sign_in_locked: account.signInLockedAt !== null,
  };
}

export function presentSignIn(session: Session, currentId: string | null): Schemas['SignIn'] {
  return {
    id: session.id,
    object: 'sign_in',
    kind: session.kind as 'browser' | 'cli',
    current: session.id === currentId,
    created_at: iso(session.createdAt),
    last_used_at: iso(session.lastUsedAt),
    expires_at: iso(session.expiresAt),
    user_agent: session.userAgent,
    ip: session.ip,
    device: session.device,
  };
}

export function presentApiToken(token: ApiToken): Schemas['ApiTokenResponse'] {
  return {
    id: token.id,
    object: 'api_token',
    label: token.label,
    token_hint: token.tokenHint,
    created_at: iso(token.createdAt),
    expires_at: iso(token.expiresAt),
    last_used_at: iso(token.lastUsedAt),
    revoked_at: iso(token.revokedAt),
  };
}

export function presentDeviceKey(key: DeviceKey): Schemas['DeviceKey'] {
  return {
    id: key.id,
    object: 'device_key',
    name: key.name,
    public_key: key.publicKey,
    fingerprint: key.fingerprint,
    created_at: iso(key.createdAt),
    last_used_at: iso(key.lastUsedAt),
  };
}

export function presentDeletion(deletion: AccountDeletion, message?: string): Schemas['AccountDeletion'] {
  return {
    id: deletion.id,
    object: 'account_deletion',
    state: deletion.state as 'pending' | 'completed',
    step: deletion.step as 'workers' | 'billing' | 'records' | 'done',
    account: deletion.email,
    attempts: deletion.attempts,
    last_error: deletion.lastError,
    requested_at: iso(deletion.requestedAt),
    updated_at: iso(deletion.updatedAt),
    completed_at: iso(deletion.completedAt),
    next_attempt_at: iso(deletion.nextAttemptAt),
    ...(message ? { message } : {}),
  };
}

export function presentService(view: ServiceView): Schemas['HostedServiceResponse'] {
  return {
    id: view.service.id,
    instance_id: view.instance.id,
    instance_name: view.instance.name,
    name: view.service.name,
    port: view.service.port,
    protocol: 'http',
    path_prefix: view.pathPrefix,
    websocket: true,
    description: view.service.description,
    status: view.status,
    public_url: view.publicUrl,
    access: view.service.access as ServiceAccess,
    wake_on_request: view.service.wakeOnRequest,
    idle_stop_minutes: view.service.idleStopMinutes,
    created_at: iso(view.service.createdAt),
    updated_at: iso(view.service.updatedAt),
  };
}
