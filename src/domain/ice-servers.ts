// ICE servers handed to desktop viewers. The WebRTC peer runs on this host, so host candidates
// reach it directly; an operator's TURN server (coturn with `use-auth-secret`) helps viewers on
// networks that block UDP. Its credentials are time-limited (the TURN REST scheme): the user name
// is `<unix expiry>:<desktop session>`, the password base64(HMAC-SHA1(secret, user name)), so no
// long-lived TURN secret ever reaches a browser.
import { createHmac } from 'node:crypto';

export interface IceServer {
  urls: string[];
  username?: string;
  credential?: string;
}

export function iceServers(turn: { urls: string[]; secret: string } | null, sessionId: string, expiresAt: Date): IceServer[] {
  if (!turn) return [];
  const username = `${Math.floor(expiresAt.getTime() / 1000)}:${sessionId}`;
  const credential = createHmac('sha1', turn.secret).update(username).digest('base64');
  return [{ urls: turn.urls, username, credential }];
}
