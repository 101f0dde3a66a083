// The universal image: the minimal set plus an Xfce desktop on the machine's screen and common tools.
//
// Display: the screen part of images/profiles/display.ts. The host gives the machine a display
// device (QEMU bochs-display, 1280x720 at start) and serves it with QEMU's own VNC server; Xorg
// (modesetting) runs on it as root (kiste-display.service), and the Xfce session runs on it as the
// desktop user (kiste-desktop.service, DISPLAY=:0, XAUTHORITY=/home/kiste/.Xauthority). Anything in
// the guest can also show or capture it: a screenshot with `scrot`, input with `xdotool`. The
// display device needs DRM drivers, so this profile boots Debian's generic kernel (pruned of the
// module trees a VM never loads), not the cloud kernel of the minimal profile.
//
// The desktop starts after multi-user.target (SSH, the agent), so it never delays a machine's
// readiness; it keeps starting in the background.
//
// Not built or booted by the test suite (it is large and slow under TCG); the minimal and the
// desktop-lite (same display part, an xterm for a session) images are.
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
import {
  DEFAULT_DISPLAY,
  DESKTOP_SESSION_SCRIPT,
  DESKTOP_USER,
  DISPLAY_DPKG_OPTIONS,
  DISPLAY_ENABLED_UNITS,
  DISPLAY_KERNEL_PACKAGE,
  DISPLAY_PACKAGES,
  displayCustomize,
  displayFiles,
} from './display';
import type { Profile } from './types';

export { DESKTOP_DISPLAY, DESKTOP_UID, DESKTOP_UNIT, DESKTOP_USER, DESKTOP_XAUTHORITY, DISPLAY_SERVER_UNIT } from './display';

const XFCONF_SKEL = '/etc/skel/.config/xfce4/xfconf/xfce-perchannel-xml';

export const desktop: Profile = {
  name: 'desktop',
  description: 'Debian bookworm with an Xfce desktop on the machine\'s screen (Xorg), OpenSSH, Node 18, the kiste agent and common tools',
  suite: BASE_SUITE,
  variant: 'minbase',
  components: ['main'],
  kernelPackage: DISPLAY_KERNEL_PACKAGE,
  packages: [
    ...BASE_PACKAGES,
    // the screen: Xorg on the display device, xdotool, xclip, xrandr
    ...DISPLAY_PACKAGES,
    // desktop: Xfce
    'xfce4',
    'xfce4-terminal',
    'dbus-x11', // dbus-launch: startxfce4 starts the session bus with it
    'at-spi2-core',
    'fonts-dejavu-core',
    'adwaita-icon-theme',
    'mousepad',
    'x11-utils', // xdpyinfo, xwininfo, xprop
    'scrot', // screenshots from inside the guest
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
  dpkgOptions: [...DISPLAY_DPKG_OPTIONS],
  files: [
    ...BASE_FILES,
    ...displayFiles({
      description: 'kiste desktop: the Xfce session on the display :0',
      environment: ['XDG_SESSION_DESKTOP=xfce', 'XDG_CURRENT_DESKTOP=XFCE'],
    }),
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
      path: DESKTOP_SESSION_SCRIPT,
      mode: 0o755,
      content: [
        '#!/bin/sh',
        '# kiste: the Xfce session, run by kiste-desktop.service as the desktop user once Xorg on :0',
        '# (kiste-display.service) accepts connections. When it ends, the unit starts it again.',
        'exec startxfce4',
        '',
      ].join('\n'),
    },
    {
      // No compositing: on an emulated CPU it only costs CPU (a lot of it).
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
  enableUnits: [...BASE_ENABLED_UNITS, ...DISPLAY_ENABLED_UNITS],
  // modprobe@drm.service stays: the display device's DRM driver is needed
  maskUnits: [...BASE_MASKED_UNITS, 'man-db.timer'],
  initramfsModules: [...BASE_INITRAMFS_MODULES],
  customize: [
    ...BASE_CUSTOMIZE,
    // the panel's default layout as the user's own: otherwise its first start asks in a dialog
    `install -D -m 644 "$ROOT/etc/xdg/xfce4/panel/default.xml" "$ROOT${XFCONF_SKEL}/xfce4-panel.xml"`,
    ...displayCustomize(['sudo']),
  ],
  kernelCmdline: BASE_KERNEL_CMDLINE,
  display: DEFAULT_DISPLAY,
};
