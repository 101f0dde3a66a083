// The viewer protocol (spec "Desktop"): preflight until the desktop can stream, then a session of the
// viewer's own (or, after a reload, the one this tab already holds), ended when the viewer leaves.
import { api, ApiError, ok, type Schemas } from '../api';
import { markSessionOpened, sessionOpened } from './link-reference';

export type DesktopSession = Schemas['DesktopSessionResponse'];
export const PROTOCOL = 'webrtc';

/** Why the desktop cannot be shown now, and whether waiting helps. */
export interface NotYet {
  message: string;
  /** Seconds until it is worth asking again; null when asking again will not help. */
  retryAfterSeconds: number | null;
}

/** The session to show, or why not yet. */
export async function openDesktop(reference: string): Promise<{ session: DesktopSession } | { notYet: NotYet; error: ApiError }> {
  const body = { protocol: PROTOCOL, machine: reference } as const;
  try {
    // A reload: the tab's own session, which outlives its link (revoked links stop only new viewers).
    if (sessionOpened(reference)) {
      try {
        return { session: await ok(api.POST('/v1/desktop/native/session/renew', { body })) };
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 'D02')) throw error;
        markSessionOpened(reference, false);
      }
    }
    await ok(api.POST('/v1/desktop/native/preflight', { body }));
    const session = await ok(api.POST('/v1/desktop/native/session', { body }));
    markSessionOpened(reference, true);
    return { session };
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    return { notYet: notYet(error), error };
  }
}

/** A fresh recovery authorization for the session this tab holds (each console connection needs one). */
export async function renewDesktop(reference: string): Promise<DesktopSession> {
  return ok(api.POST('/v1/desktop/native/session/renew', { body: { protocol: PROTOCOL, machine: reference } }));
}

export async function endDesktop(session: DesktopSession, reference: string): Promise<void> {
  markSessionOpened(reference, false);
  const id = new URL(session.revoke_url).pathname.split('/').pop()!;
  await ok(api.DELETE('/v1/desktop/native/session/{session}', { params: { path: { session: id } } })).catch(() => undefined);
}

function notYet(error: ApiError): NotYet {
  switch (error.code) {
    case 'D03':
      return { message: 'The desktop is still starting.', retryAfterSeconds: error.retryAfterSeconds ?? 5 };
    case 'K03':
      return { message: 'The machine is not running. Start or resume it; the desktop opens when it is back.', retryAfterSeconds: 5 };
    case 'D01':
      return { message: 'This desktop link is invalid, has expired or was revoked. Ask for a new link.', retryAfterSeconds: null };
    case 'D06':
      return { message: 'This machine has no desktop.', retryAfterSeconds: null };
    default:
      return { message: error.message, retryAfterSeconds: error.status === 503 || error.status === 429 || error.status === 0 ? (error.retryAfterSeconds ?? 5) : null };
  }
}

/**
 * Before reconnecting the tab's session: null when the desktop can stream (or the link can no longer
 * tell: a revoked link still lets this tab's session renew), else why not yet.
 */
export async function checkReady(reference: string): Promise<{ notYet: NotYet; error: ApiError } | null> {
  try {
    await ok(api.POST('/v1/desktop/native/preflight', { body: { protocol: PROTOCOL, machine: reference } }));
    return null;
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    if (error.code === 'D01') return null;
    return { notYet: notYet(error), error };
  }
}
