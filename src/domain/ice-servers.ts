// ICE servers handed to desktop viewers. The WebRTC peer runs on this host, so host candidates
// reach it directly; an operator's TURN server (coturn with `use-auth-secret`) helps viewers on
// networks that block UDP. Its credentials are time-limited (the TURN REST scheme): the user name
// is `<unix expiry>:<desktop session>`, the password base64(HMAC-SHA1(secret, user name)), so no
// long-lived TURN secret ever reaches a browser. They live minutes, not the session's day: coturn
// checks them only when a relay allocation is made, so a stream relayed in time outlives them, and
// the viewer renews its session (getting fresh ones) before every connect and reconnect; a leaked
// user name and password open the relay to nobody for long.
import { createHmac } from 'node:crypto';

export interface IceServer {
  urls: string[];
  username?: string;
  credential?: string;
}

/** How long a viewer's TURN credentials may be used to make an allocation. */
export const TURN_CREDENTIAL_SECONDS = 600;

/** The ICE servers for a session's viewer now: TURN credentials until TURN_CREDENTIAL_SECONDS from now, or the session's end if sooner. */
export function iceServers(turn: { urls: string[]; secret: string } | null, sessionId: string, now: Date, sessionExpiresAt: Date): IceServer[] {
  if (!turn) return [];
  const expiry = Math.min(Math.floor(now.getTime() / 1000) + TURN_CREDENTIAL_SECONDS, Math.floor(sessionExpiresAt.getTime() / 1000));
  const username = `${expiry}:${sessionId}`;
  const credential = createHmac('sha1', turn.secret).update(username).digest('base64');
  return [{ urls: turn.urls, username, credential }];
}
