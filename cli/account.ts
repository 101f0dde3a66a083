// Account commands: API keys, device keys (SSH public keys every machine of the account trusts) and
// the event stream (--follow long-polls it).
import { readFileSync } from 'node:fs';
import { apiFor, ok, requireToken } from './api';
import type { CliContext } from './context';
import { table } from './machines';

export async function listApiKeys(ctx: CliContext): Promise<{ json: unknown; text: string }> {
  requireToken(ctx);
  const keys = ok(await apiFor(ctx).GET('/v1/api-tokens'));
  const rows = keys.map((k) => [k.id, k.label, k.token_hint, k.expires_at, k.revoked_at ? 'revoked' : (k.last_used_at ?? 'never used')]);
  return { json: keys, text: table(['ID', 'LABEL', 'HINT', 'EXPIRES', 'LAST USED'], rows) };
}

export async function createApiKey(ctx: CliContext, label: string, days: number): Promise<{ json: unknown; text: string }> {
  requireToken(ctx);
  const created = ok(await apiFor(ctx).POST('/v1/api-tokens', { body: { label, expires_in_seconds: days * 86_400 } }));
  // The value is shown once, on stdout alone, so that it can be captured: KEY=$(kiste keys create …)
  return { json: created, text: created.token };
}

export async function revokeApiKey(ctx: CliContext, id: string): Promise<void> {
  requireToken(ctx);
  ok(await apiFor(ctx).DELETE('/v1/api-tokens/{id}', { params: { path: { id } } }));
}

export async function listDeviceKeys(ctx: CliContext): Promise<{ json: unknown; text: string }> {
  requireToken(ctx);
  const list = ok(await apiFor(ctx).GET('/v1/device-keys', { params: { query: { limit: 100 } } }));
  return { json: list, text: table(['ID', 'NAME', 'FINGERPRINT', 'ADDED'], list.data.map((k) => [k.id, k.name, k.fingerprint, k.created_at])) };
}

export async function addDeviceKey(ctx: CliContext, name: string, file: string): Promise<{ json: unknown; text: string }> {
  requireToken(ctx);
  const key = ok(await apiFor(ctx).POST('/v1/device-keys', { body: { name, public_key: readFileSync(file, 'utf8').trim() } }));
  return { json: key, text: `${key.id} ${key.fingerprint}` };
}

export async function deleteDeviceKey(ctx: CliContext, id: string): Promise<void> {
  requireToken(ctx);
  ok(await apiFor(ctx).DELETE('/v1/device-keys/{id}', { params: { path: { id } } }));
}

/** Prints events after `after` (default: from the oldest kept); with follow, waits for new ones until interrupted. */
export async function watchEvents(ctx: CliContext, options: { after: number; follow: boolean }, write: (line: string) => void): Promise<void> {
  requireToken(ctx);
  let after = options.after;
  for (;;) {
    const page = ok(await apiFor(ctx).GET('/v1/events', { params: { query: { after, limit: 200, ...(options.follow ? { wait_ms: 25_000 } : {}) } } }));
    for (const event of page.data) {
      write(ctx.json ? JSON.stringify(event) : `${event.sequence}  ${event.created_at}  ${event.type}  ${event.resource_type}/${event.resource_id}`);
    }
    after = page.next_cursor;
    if (!options.follow && !page.has_more) return;
  }
}
