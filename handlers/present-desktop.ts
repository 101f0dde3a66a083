// The viewer's desktop session as the API answers it (session and renew).
import type { OpenedDesktopSession } from '../src/domain/desktops';
import type { components } from '../src/generated/api';
import type { Services } from '../src/services';

/** The only streaming protocol a viewer may ask for; the recovery console comes with every session. */
export const DESKTOP_PROTOCOL = 'webrtc';

export function presentDesktopSession(services: Services, opened: OpenedDesktopSession): components['schemas']['DesktopSessionResponse'] {
  const { session } = opened;
  // The viewer runs at the desktop URL: every address it is given is on that origin.
  const base = services.config.desktopUrl;
  const recoveryUrl = new URL(`/v1/desktop/recovery/${session.id}`, base.replace(/^http/, 'ws'));
  return {
    protocol: DESKTOP_PROTOCOL,
    transport: 'webrtc',
    offer_url: new URL(`/v1/desktop/native/${session.id}/offer`, base).toString(),
    revoke_url: new URL(`/v1/desktop/native/session/${session.id}`, base).toString(),
    expires_at: session.expiresAt.toISOString(),
    recovery: { url: recoveryUrl.toString(), token: opened.recoveryToken, expires_at: opened.recoveryExpiresAt.toISOString() },
    ice_servers: services.desktops.iceServers(session),
  };
}
