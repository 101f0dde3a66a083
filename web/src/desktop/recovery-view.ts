// The recovery console: noVNC on the session's RFB WebSocket (QEMU's own view of the machine's
// screen, so it works whatever the guest's desktop does). Loaded on demand: noVNC is not part of the
// console's first load.
import type { ScreenEvents, ScreenView } from './webrtc-view';


export async function openRecoveryView(target: HTMLElement, url: string, token: string, fit: boolean, events: ScreenEvents): Promise<ScreenView> {
  const { default: RFB } = await import('@novnc/novnc');
  const address = new URL(url);
  address.searchParams.set('token', token);
  // shared: other viewers of the same machine stay connected.
  const rfb = new RFB(target, address.toString(), { shared: true });
  rfb.scaleViewport = fit;
  rfb.clipViewport = !fit;
  rfb.focusOnClick = true;
  rfb.background = '#111';
  rfb.addEventListener('connect', () => events.connected());
  rfb.addEventListener('disconnect', () => events.disconnected(false));
  return {
    disconnect: () => rfb.disconnect(),
    setScale(value) {
      rfb.scaleViewport = value;
      rfb.clipViewport = !value;
    },
    focus: () => rfb.focus(),
  };
}
