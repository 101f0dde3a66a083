// The smallest image with a screen, for tests of the display path: the minimal set plus the display
// part (images/profiles/display.ts: generic kernel, Xorg on the display device, xdotool, xclip,
// xrandr) and, for a session, one xterm filling the screen; no window manager, no
// desktop environment. Tests type into the xterm through the display's input devices and read its
// pixels back. Built and booted by the test suite (test/support/images.ts).
import {
  BASE_CUSTOMIZE,
  BASE_ENABLED_UNITS,
  BASE_FILES,
  BASE_INITRAMFS_MODULES,
  BASE_KERNEL_CMDLINE,
  BASE_MASKED_UNITS,
  BASE_SUITE,
} from './base';
import {
  DEFAULT_DISPLAY,
  DESKTOP_SESSION_SCRIPT,
  DISPLAY_DPKG_OPTIONS,
  DISPLAY_ENABLED_UNITS,
  DISPLAY_KERNEL_PACKAGE,
  DISPLAY_PACKAGES,
  displayCustomize,
  displayFiles,
} from './display';
import { MINIMAL_PACKAGES, SLIM_DPKG_OPTIONS } from './minimal';
import type { Profile } from './types';

/**
 * Files a test machine never uses, left out to keep the image small (dpkg never unpacks them):
 * Mesa's GL drivers with LLVM and Z3 under them (Xorg runs without acceleration; nothing here draws
 * with GL), and the C compiler that `cpp` (a dependency of x11-xserver-utils, for xrdb) brings. Not
 * for the desktop profile: there a user may install programs that need them.
 */
const LITE_DPKG_OPTIONS = [
  'path-exclude=/usr/lib/x86_64-linux-gnu/dri/*',
  'path-exclude=/usr/lib/x86_64-linux-gnu/libLLVM-*',
  'path-exclude=/usr/lib/x86_64-linux-gnu/libz3.so*',
  'path-exclude=/usr/lib/gcc/x86_64-linux-gnu/*/cc1',
];

export const desktopLite: Profile = {
  name: 'desktop-lite',
  description: 'Debian bookworm minbase, systemd, OpenSSH, Node 18, git, the kiste agent and an xterm on the machine\'s screen (Xorg); for tests',
  suite: BASE_SUITE,
  variant: 'minbase',
  components: ['main'],
  kernelPackage: DISPLAY_KERNEL_PACKAGE,
  packages: [...MINIMAL_PACKAGES, ...DISPLAY_PACKAGES, 'xterm'],
  dpkgOptions: [...SLIM_DPKG_OPTIONS, ...DISPLAY_DPKG_OPTIONS, ...LITE_DPKG_OPTIONS],
  files: [
    ...BASE_FILES,
    ...displayFiles({ description: 'kiste desktop: an xterm on the display :0', environment: [] }),
    {
      path: DESKTOP_SESSION_SCRIPT,
      mode: 0o755,
      content: [
        '#!/bin/sh',
        '# kiste: the desktop-lite session, run by kiste-desktop.service as the desktop user once Xorg on :0',
        '# accepts connections: one xterm over the whole screen (X\'s built-in "fixed" font, 6x13 pixels),',
        '# with the keyboard focus (there is no window manager to give it). The unit starts it again when',
        '# the xterm ends.',
        'set -eu',
        'set -- $(xdotool getdisplaygeometry)',
        'xterm -fn fixed -bg white -fg black -geometry "$(($1 / 6))x$(($2 / 13))+0+0" &',
        'xterm=$!',
        // once it is on the screen (focusing an unmapped window fails)
        'xdotool search --sync --onlyvisible --pid "$xterm" | head -n 1 | xargs -r xdotool windowfocus || true',
        'wait "$xterm"',
        '',
      ].join('\n'),
    },
  ],
  enableUnits: [...BASE_ENABLED_UNITS, ...DISPLAY_ENABLED_UNITS],
  // unlike minimal, modprobe@drm.service stays: the display device's DRM driver is needed
  maskUnits: [...BASE_MASKED_UNITS],
  initramfsModules: [...BASE_INITRAMFS_MODULES],
  customize: [...BASE_CUSTOMIZE, ...displayCustomize()],
  kernelCmdline: BASE_KERNEL_CMDLINE,
  display: DEFAULT_DISPLAY,
};
