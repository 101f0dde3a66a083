// The recovery console: noVNC on the session's RFB WebSocket (QEMU's own view of the machine's
// screen, so it works whatever the guest's desktop does). Loaded on demand: noVNC is not part of the
// console's first load.
export interface RecoveryView {
  disconnect(): void;
  setScale(fit: boolean): void;
  focus(): void;
}

export interface RecoveryEvents {
  connected(): void;
  /** The connection ended; `clean` when either side closed it in order. */
  disconnected(clean: boolean): void;
}

export async function openRecoveryView(target: HTMLElement, url: string, token: string, fit: boolean, events: RecoveryEvents): Promise<RecoveryView> {
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
  rfb.addEventListener('disconnect', (event) => events.disconnected(Boolean((event as CustomEvent<{ clean: boolean }>).detail?.clean)));
  return {
    disconnect: () => rfb.disconnect(),
    setScale(value) {
      rfb.scaleViewport = value;
      rfb.clipViewport = !value;
    },
    focus: () => rfb.focus(),
  };
}
