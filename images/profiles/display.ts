// The screen of the images that have one (desktop, desktop-lite): what they add to the base so that
// the host's display device shows a desktop session.
//
// The host gives such a machine a display device (QEMU `bochs-display`, a plain linear framebuffer
// with an EDID of the image's initial size), a virtio tablet and a virtio keyboard, and serves the
// framebuffer itself with QEMU's VNC server on a unix socket in the machine's run folder
// (src/compute/qemu/command-line.ts): pixels leave and input arrives without passing through guest
// code. In the guest:
//
// - kernel: Debian's generic kernel (`linux-image-amd64`): the cloud kernel has no DRM and no input
//   drivers for it. Its big module trees nobody needs on a kiste machine (sound, wireless, media,
//   hardware NICs, the large GPU drivers, InfiniBand, staging, Bluetooth) are never unpacked (dpkg
//   path-exclude); bochs (DRM), virtio, input and HID stay. udev loads `bochs` at boot, fbcon shows
//   a text console on tty1 (with a getty: what the recovery console shows when X is broken); the
//   serial console stays on ttyS0.
// - `kiste-display.service` (root): Xorg on :0 (modesetting driver on /dev/dri/card0, libinput for
//   the tablet and keyboard, no screen saver, no DPMS, no TCP) with a fresh X cookie, which the
//   desktop user gets in ~/.Xauthority (family "wild": valid under any host name; the agent renames
//   the machine while X starts). The unit is active once X accepts connections.
// - `kiste-desktop.service` (the desktop user, `kiste`): the profile's session script
//   (/usr/lib/kiste/desktop-session) once X is up; restarted whenever it ends, stopped with X.
// - `xdotool` (scripted input for agents: `DISPLAY=:0 XAUTHORITY=/home/kiste/.Xauthority xdotool …`),
//   `xclip` (the clipboard, through the agent) and `xrandr` (the host resizes the screen with it).
//   No spice-vdagent: QEMU 7.2's `qemu-vdagent` (the clipboard bridge to VNC clients) blocks
//   migration, so machines with it could not save a memory session.
//
// Everything starts after multi-user.target (SSH, the agent): the display never delays a machine's
// readiness.
import type { DisplaySpec, ImageFile } from './types';

/** The desktop session's user; root stays reachable by SSH key like on every image. */
export const DESKTOP_USER = 'kiste';
/** Its uid, fixed: the unit names its runtime directory /run/user/<uid>. */
export const DESKTOP_UID = 1000;
/** X display of the desktop session. */
export const DESKTOP_DISPLAY = ':0';
/** The X authority file of the desktop user: every X client of the machine uses this one. */
export const DESKTOP_XAUTHORITY = `/home/${DESKTOP_USER}/.Xauthority`;
/** The unit that runs Xorg (as root) on the display device. */
export const DISPLAY_SERVER_UNIT = 'kiste-display.service';
/** The unit that runs the profile's desktop session as the desktop user on that X server. */
export const DESKTOP_UNIT = 'kiste-desktop.service';
/** The session script a profile supplies (run by DESKTOP_UNIT). */
export const DESKTOP_SESSION_SCRIPT = '/usr/lib/kiste/desktop-session';
/** The screen's size when the machine starts (the display device's preferred mode). */
export const DEFAULT_DISPLAY: DisplaySpec = { width: 1280, height: 720 };

const DISPLAY_SERVER_SCRIPT = '/usr/lib/kiste/display-server';
const DISPLAY_WAIT_SCRIPT = '/usr/lib/kiste/display-wait';
/** The server's copy of the cookie (root's). */
const SERVER_XAUTHORITY = '/run/kiste-display/Xauthority';

export const DISPLAY_KERNEL_PACKAGE = 'linux-image-amd64';

export const DISPLAY_PACKAGES = [
  'xserver-xorg-core', // Xorg with the modesetting driver
  'xserver-xorg-input-libinput',
  'xauth',
  'x11-xserver-utils', // xrandr, xset
  'xdotool',
  'xclip',
];

/** Module trees of the generic kernel that no kiste machine loads (dpkg never unpacks them). */
const PRUNED_MODULE_TREES = [
  'sound',
  'drivers/net/wireless',
  'drivers/net/ethernet', // hardware NICs: machines have virtio-net
  'drivers/media',
  'drivers/infiniband',
  'drivers/staging',
  'drivers/bluetooth',
  'drivers/isdn',
  'drivers/gpu/drm/amd',
  'drivers/gpu/drm/nouveau',
  'drivers/gpu/drm/i915',
  'drivers/gpu/drm/radeon',
  'net/wireless',
  'net/mac80211',
  'net/bluetooth',
];

export const DISPLAY_DPKG_OPTIONS = PRUNED_MODULE_TREES.map((tree) => `path-exclude=/lib/modules/*/kernel/${tree}/*`);

export const DISPLAY_ENABLED_UNITS = [DISPLAY_SERVER_UNIT, DESKTOP_UNIT, 'getty@tty1.service'];

/** The desktop session unit; `environment` is the session's (XDG_* names, …). */
function sessionUnit(description: string, environment: string[]): string {
  return [
    '[Unit]',
    `Description=${description}`,
    // X is up when the server's unit is active; the session goes when X goes
    `BindsTo=${DISPLAY_SERVER_UNIT}`,
    `After=${DISPLAY_SERVER_UNIT} systemd-user-sessions.service`,
    // the user's runtime directory /run/user/<uid> (the user lingers: logind never stops it)
    `Wants=user@${DESKTOP_UID}.service`,
    `After=user@${DESKTOP_UID}.service`,
    'StartLimitIntervalSec=0',
    '',
    '[Service]',
    // No PAMName: pam_systemd would move the session into a logind scope, out of this unit, and
    // a restart of the unit would then leave the old clients running.
    `User=${DESKTOP_USER}`,
    'WorkingDirectory=~',
    `Environment=DISPLAY=${DESKTOP_DISPLAY} XAUTHORITY=${DESKTOP_XAUTHORITY} XDG_RUNTIME_DIR=/run/user/${DESKTOP_UID} XDG_SESSION_TYPE=x11${environment.map((e) => ` ${e}`).join('')}`,
    `ExecStart=${DESKTOP_SESSION_SCRIPT}`,
    'Restart=always',
    'RestartSec=1',
    '',
    '[Install]',
    'WantedBy=graphical.target',
    '',
  ].join('\n');
}

/** Files of the display part; the profile adds its session script at DESKTOP_SESSION_SCRIPT. */
export function displayFiles(session: { description: string; environment: string[] }): ImageFile[] {
  return [
    {
      path: '/etc/X11/xorg.conf.d/10-kiste.conf',
      content: [
        '# kiste: the display device is QEMU\'s bochs-display (bochs DRM driver): modesetting, no GPU',
        '# acceleration (there is no GPU: glamor would only fail to start), no screen blanking, no VT',
        '# switching from the keyboard (the viewer\'s keys belong to the session).',
        'Section "ServerFlags"',
        '    Option "BlankTime" "0"',
        '    Option "StandbyTime" "0"',
        '    Option "SuspendTime" "0"',
        '    Option "OffTime" "0"',
        '    Option "DontVTSwitch" "true"',
        '    Option "DontZap" "true"',
        'EndSection',
        '',
        'Section "Device"',
        '    Identifier "kiste display"',
        '    Driver "modesetting"',
        '    Option "AccelMethod" "none"',
        'EndSection',
        '',
      ].join('\n'),
    },
    {
      path: `/etc/systemd/system/${DISPLAY_SERVER_UNIT}`,
      content: [
        '[Unit]',
        `Description=kiste display: Xorg on ${DESKTOP_DISPLAY} (the machine's display device)`,
        // after SSH and the rest of the boot: the display must not slow down a machine's readiness
        'After=multi-user.target systemd-user-sessions.service',
        // the session is started again whenever X runs and the session does not
        `Upholds=${DESKTOP_UNIT}`,
        'StartLimitIntervalSec=0',
        '',
        '[Service]',
        `ExecStart=${DISPLAY_SERVER_SCRIPT}`,
        // active (and the session started) only once X accepts connections
        `ExecStartPost=${DISPLAY_WAIT_SCRIPT}`,
        'Restart=always',
        'RestartSec=2',
        '',
        '[Install]',
        'WantedBy=graphical.target',
        '',
      ].join('\n'),
    },
    {
      path: DISPLAY_SERVER_SCRIPT,
      mode: 0o755,
      content: [
        '#!/bin/sh',
        `# kiste: runs Xorg on ${DESKTOP_DISPLAY} for ${DISPLAY_SERVER_UNIT}. A fresh cookie at every start: the server`,
        `# reads it from ${SERVER_XAUTHORITY} (root's), clients from the desktop user's ${DESKTOP_XAUTHORITY}.`,
        'set -eu',
        // udev loads bochs (DRM) early in the boot; wait for it rather than let Xorg fail
        'tries=0',
        'until [ -e /dev/dri/card0 ]; do',
        '  tries=$((tries + 1))',
        '  [ "$tries" -lt 300 ] || { echo "kiste-display: no /dev/dri/card0 (no display device, or no DRM driver for it)" >&2; exit 1; }',
        '  sleep 0.1',
        'done',
        `mkdir -p -m 0700 ${SERVER_XAUTHORITY.replace(/\/[^/]*$/, '')}`,
        'umask 077',
        `rm -f ${SERVER_XAUTHORITY} ${SERVER_XAUTHORITY}.new`,
        `: > ${SERVER_XAUTHORITY}.new`,
        `xauth -q -f ${SERVER_XAUTHORITY}.new add ${DESKTOP_DISPLAY} . "$(od -An -N16 -tx1 /dev/urandom | tr -d " \\n")"`,
        // the cookie for any host name (family "wild", ffff): the agent renames the machine while
        // the display starts, and a cookie filed under the old name would lock every client out
        `: > ${SERVER_XAUTHORITY}`,
        `xauth -f ${SERVER_XAUTHORITY}.new nlist ${DESKTOP_DISPLAY} | sed -e "s/^..../ffff/" | xauth -q -f ${SERVER_XAUTHORITY} nmerge -`,
        `rm -f ${SERVER_XAUTHORITY}.new`,
        // the user's copy, written as the user (root never writes into a home it does not own)
        `runuser -u ${DESKTOP_USER} -- sh -c 'umask 077; cat > "$1.new" && mv -f "$1.new" "$1"' sh ${DESKTOP_XAUTHORITY} < ${SERVER_XAUTHORITY}`,
        // vt7: the text console stays on tty1; -s 0 -dpms: the screen never blanks; -noreset: the
        // server goes on when its last client (a restarting session) goes
        `exec Xorg ${DESKTOP_DISPLAY} vt7 -auth ${SERVER_XAUTHORITY} -nolisten tcp -s 0 -dpms -noreset -novtswitch`,
        '',
      ].join('\n'),
    },
    {
      path: DISPLAY_WAIT_SCRIPT,
      mode: 0o755,
      content: [
        '#!/bin/sh',
        `# kiste: ${DISPLAY_SERVER_UNIT} is started once X on ${DESKTOP_DISPLAY} accepts connections (at most 120 s).`,
        `export DISPLAY=${DESKTOP_DISPLAY} XAUTHORITY=${SERVER_XAUTHORITY}`,
        'tries=0',
        'until xset q >/dev/null 2>&1; do',
        '  tries=$((tries + 1))',
        '  [ "$tries" -lt 1200 ] || { echo "kiste-display: X did not accept connections within 120 s" >&2; exit 1; }',
        '  sleep 0.1',
        'done',
        '',
      ].join('\n'),
    },
    {
      path: `/etc/systemd/system/${DESKTOP_UNIT}`,
      content: sessionUnit(session.description, session.environment),
    },
  ];
}

/** Customize lines of the display part: the desktop user (in `groups` besides video, audio, input). */
export function displayCustomize(groups: string[] = []): string[] {
  return [
    `chroot "$ROOT" useradd --uid ${DESKTOP_UID} --create-home --shell /bin/bash --groups ${[...groups, 'video', 'audio', 'input'].join(',')} ${DESKTOP_USER}`,
    // lingering: logind starts the user's manager and runtime directory at boot and never stops them
    // (not even when a login of the same user, e.g. `su - kiste`, ends)
    `mkdir -p "$ROOT/var/lib/systemd/linger" && : > "$ROOT/var/lib/systemd/linger/${DESKTOP_USER}"`,
    'chroot "$ROOT" systemctl set-default graphical.target',
    // the display's DRM driver is there (the generic kernel, not pruned away): else fail the build
    'ls "$ROOT"/lib/modules/*/kernel/drivers/gpu/drm/tiny/bochs.ko* >/dev/null',
  ];
}
