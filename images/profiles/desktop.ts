// The universal image: the minimal set plus an Xfce desktop on a virtual display and common tools.
//
// Display: kiste machines have no graphics device (the QEMU command line is `-nodefaults -display
// none`, src/compute/qemu/command-line.ts), so the desktop does not need one: the X server is Xvfb,
// a virtual display in guest memory, started with an X authority cookie by kiste-desktop.service as
// the desktop user, and the Xfce session runs on it (DISPLAY=:0). Anything in the guest can show or
// capture it (DISPLAY=:0 XAUTHORITY=/home/kiste/.Xauthority): a screenshot with `scrot`, a VNC or
// WebRTC server for the desktop viewer. No display device also means no DRM drivers are needed, so
// this profile boots the same small cloud kernel as the minimal one.
//
// The desktop starts after multi-user.target (SSH, the agent), so it never delays a machine's
// readiness; it keeps starting in the background.
//
// Not built or booted by the test suite (it is large and slow under TCG); the minimal image is.
import {
  BASE_CUSTOMIZE,
  BASE_ENABLED_UNITS,
  BASE_FILES,
  BASE_INITRAMFS_MODULES,
  BASE_KERNEL_CMDLINE,
  BASE_MASKED_UNITS,
  BASE_PACKAGES,
  BASE_SUITE,
} from './base';
import type { Profile } from './types';

/** The desktop session's user; root stays reachable by SSH key like on every image. */
export const DESKTOP_USER = 'kiste';
/** Its uid, fixed: the unit names its runtime directory /run/user/<uid>. */
export const DESKTOP_UID = 1000;
/** X display of the desktop session. */
export const DESKTOP_DISPLAY = ':0';
/** The unit that runs Xvfb and the Xfce session. */
export const DESKTOP_UNIT = 'kiste-desktop.service';
/** Size and colour depth of the virtual display, unless /etc/default/kiste-desktop says otherwise. */
export const DESKTOP_GEOMETRY = '1920x1080x24';

const DESKTOP_SESSION_SCRIPT = '/usr/lib/kiste/desktop-session';
const XFCONF_SKEL = '/etc/skel/.config/xfce4/xfconf/xfce-perchannel-xml';

export const desktop: Profile = {
  name: 'desktop',
  description: 'Debian bookworm with an Xfce desktop on a virtual display (Xvfb), OpenSSH, Node 18, the kiste agent and common tools',
  suite: BASE_SUITE,
  variant: 'minbase',
  components: ['main'],
  kernelPackage: 'linux-image-cloud-amd64',
  packages: [
    ...BASE_PACKAGES,
    // desktop: X server on a virtual display, Xfce
    'xvfb',
    'xauth',
    'xfce4',
    'xfce4-terminal',
    'dbus-x11', // dbus-launch: startxfce4 starts the session bus with it
    'at-spi2-core',
    'fonts-dejavu-core',
    'adwaita-icon-theme',
    'mousepad',
    'x11-utils', // xdpyinfo, xwininfo, xprop
    'scrot', // screenshots of the virtual display
    // common tools
    'sudo',
    'git',
    'vim-tiny',
    'nano',
    'htop',
    'wget',
    'unzip',
    'xz-utils',
    'openssh-client',
    'rsync',
    'jq',
    'python3',
    'build-essential',
    'man-db',
    'manpages',
    'iputils-ping',
    'dnsutils',
    'locales',
  ],
  dpkgOptions: [],
  files: [
    ...BASE_FILES,
    {
      path: `/etc/sudoers.d/50-kiste`,
      mode: 0o440,
      content: `${DESKTOP_USER} ALL=(ALL) NOPASSWD:ALL\n`,
    },
    {
      path: '/etc/default/locale',
      content: 'LANG=C.UTF-8\n',
    },
    {
      path: '/etc/default/kiste-desktop',
      content: [
        '# kiste: the virtual display of the desktop (kiste-desktop.service): WIDTHxHEIGHTxDEPTH',
        `KISTE_DISPLAY_GEOMETRY=${DESKTOP_GEOMETRY}`,
        '',
      ].join('\n'),
    },
    {
      path: `/etc/systemd/system/${DESKTOP_UNIT}`,
      content: [
        '[Unit]',
        `Description=kiste desktop: Xfce on the virtual display ${DESKTOP_DISPLAY} (Xvfb)`,
        // after SSH and the rest of the boot: the desktop must not slow down a machine's readiness
        'After=multi-user.target systemd-user-sessions.service',
        // the user's runtime directory /run/user/<uid> (the user lingers: logind never stops it)
        `Wants=user@${DESKTOP_UID}.service`,
        `After=user@${DESKTOP_UID}.service`,
        'StartLimitIntervalSec=0',
        '',
        '[Service]',
        // No PAMName: pam_systemd would move the session into a logind scope, out of this unit, and
        // a restart of the unit would then leave the old X server and clients running.
        `User=${DESKTOP_USER}`,
        'WorkingDirectory=~',
        `Environment=XDG_RUNTIME_DIR=/run/user/${DESKTOP_UID} XDG_SESSION_TYPE=x11 XDG_SESSION_DESKTOP=xfce XDG_CURRENT_DESKTOP=XFCE`,
        'EnvironmentFile=-/etc/default/kiste-desktop',
        `ExecStart=${DESKTOP_SESSION_SCRIPT}`,
        'Restart=always',
        'RestartSec=2',
        '',
        '[Install]',
        'WantedBy=graphical.target',
        '',
      ].join('\n'),
    },
    {
      path: DESKTOP_SESSION_SCRIPT,
      mode: 0o755,
      content: [
        '#!/bin/sh',
        `# kiste: the desktop session, run by ${DESKTOP_UNIT} as the desktop user. An X server on a virtual`,
        '# display (Xvfb: no graphics device needed) that only clients with the cookie in ~/.Xauthority may',
        '# use, then Xfce on it. When either ends, the unit stops the rest and starts both again.',
        'set -eu',
        `export DISPLAY=${DESKTOP_DISPLAY} XAUTHORITY="$HOME/.Xauthority"`,
        `geometry="\${KISTE_DISPLAY_GEOMETRY:-${DESKTOP_GEOMETRY}}"`,
        'umask 077',
        'rm -f "$XAUTHORITY" "$XAUTHORITY.new"',
        ': > "$XAUTHORITY.new"',
        'xauth -q -f "$XAUTHORITY.new" add "$DISPLAY" . "$(od -An -N16 -tx1 /dev/urandom | tr -d " \\n")"',
        // the cookie for any host name (family "wild", ffff): the agent renames the machine while
        // the desktop starts, and a cookie filed under the old name would lock every client out
        ': > "$XAUTHORITY"',
        'xauth -f "$XAUTHORITY.new" nlist "$DISPLAY" | sed -e "s/^..../ffff/" | xauth -q -f "$XAUTHORITY" nmerge -',
        'rm -f "$XAUTHORITY.new"',
        'umask 022',
        // -s 0: no X screen saver blanking the display after ten idle minutes
        'Xvfb "$DISPLAY" -screen 0 "$geometry" -nolisten tcp -auth "$XAUTHORITY" -s 0 &',
        'xvfb=$!',
        'tries=0',
        'until xset q >/dev/null 2>&1; do',
        '  kill -0 "$xvfb" 2>/dev/null || { echo "kiste-desktop: Xvfb exited" >&2; exit 1; }',
        '  tries=$((tries + 1))',
        '  [ "$tries" -lt 600 ] || { echo "kiste-desktop: Xvfb did not accept connections within 60 s" >&2; exit 1; }',
        '  sleep 0.1',
        'done',
        'exec startxfce4',
        '',
      ].join('\n'),
    },
    {
      // No compositing: on a virtual display it only costs CPU (a lot of it on an emulated one).
      path: `${XFCONF_SKEL}/xfwm4.xml`,
      content: [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<channel name="xfwm4" version="1.0">',
        '  <property name="general" type="empty">',
        '    <property name="use_compositing" type="bool" value="false"/>',
        '  </property>',
        '</channel>',
        '',
      ].join('\n'),
    },
  ],
  enableUnits: [...BASE_ENABLED_UNITS, DESKTOP_UNIT],
  // the cloud kernel has no DRM drivers (and a kiste machine no graphics device)
  maskUnits: [...BASE_MASKED_UNITS, 'man-db.timer', 'modprobe@drm.service'],
  initramfsModules: [...BASE_INITRAMFS_MODULES],
  customize: [
    ...BASE_CUSTOMIZE,
    // the panel's default layout as the user's own: otherwise its first start asks in a dialog
    `install -D -m 644 "$ROOT/etc/xdg/xfce4/panel/default.xml" "$ROOT${XFCONF_SKEL}/xfce4-panel.xml"`,
    `chroot "$ROOT" useradd --uid ${DESKTOP_UID} --create-home --shell /bin/bash --groups sudo,video,audio,input ${DESKTOP_USER}`,
    // lingering: logind starts the user's manager and runtime directory at boot and never stops them
    // (not even when a login of the same user, e.g. \`su - ${DESKTOP_USER}\`, ends)
    `mkdir -p "$ROOT/var/lib/systemd/linger" && : > "$ROOT/var/lib/systemd/linger/${DESKTOP_USER}"`,
    'chroot "$ROOT" systemctl set-default graphical.target',
  ],
  kernelCmdline: BASE_KERNEL_CMDLINE,
};
