// The universal image: the minimal set plus an Xfce desktop on the machine's virtual display and
// common tools.
//
// Display: QEMU's emulated GPU (`-device virtio-vga`, or `-vga std`) shown through QEMU's own VNC
// server (`-vnc unix:PATH`), with `-device virtio-tablet-pci -device virtio-keyboard-pci` for input.
// Debian's cloud kernel has no DRM drivers at all, so this profile boots the generic kernel
// (bochs / virtio-gpu DRM, virtio input). LightDM logs the desktop user in automatically.
//
// Not built or booted by the test suite (it is large and slow under TCG); the minimal image is.
import { BASE_CUSTOMIZE, BASE_ENABLED_UNITS, BASE_FILES, BASE_INITRAMFS_MODULES, BASE_MASKED_UNITS, BASE_PACKAGES, BASE_SUITE } from './base';
import type { Profile } from './types';

/** The desktop session's user; root stays reachable by SSH key like on every image. */
export const DESKTOP_USER = 'kiste';

export const desktop: Profile = {
  name: 'desktop',
  description: 'Debian bookworm with an Xfce desktop on the virtual display, OpenSSH, Node 18, the kiste agent and common tools',
  suite: BASE_SUITE,
  variant: 'minbase',
  components: ['main'],
  kernelPackage: 'linux-image-amd64',
  packages: [
    ...BASE_PACKAGES,
    // desktop
    'xserver-xorg-core',
    'xserver-xorg-input-libinput',
    'xfce4',
    'xfce4-terminal',
    'lightdm',
    'dbus-x11',
    'at-spi2-core',
    'fonts-dejavu-core',
    'adwaita-icon-theme',
    'mousepad',
    // common tools
    'sudo',
    'git',
    'vim-tiny',
    'nano',
    'htop',
    'wget',
    'unzip',
    'xz-utils',
    'zstd',
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
      path: '/etc/lightdm/lightdm.conf.d/50-kiste.conf',
      content: ['[Seat:*]', `autologin-user=${DESKTOP_USER}`, 'autologin-session=xfce', 'user-session=xfce', ''].join('\n'),
    },
    {
      path: `/etc/sudoers.d/50-kiste`,
      mode: 0o440,
      content: `${DESKTOP_USER} ALL=(ALL) NOPASSWD:ALL\n`,
    },
    {
      path: '/etc/default/locale',
      content: 'LANG=C.UTF-8\n',
    },
  ],
  enableUnits: [...BASE_ENABLED_UNITS, 'lightdm.service'],
  maskUnits: [...BASE_MASKED_UNITS, 'man-db.timer'],
  initramfsModules: [...BASE_INITRAMFS_MODULES],
  customize: [
    ...BASE_CUSTOMIZE,
    `chroot "$ROOT" useradd --create-home --shell /bin/bash --groups sudo,video,audio,input ${DESKTOP_USER}`,
    'chroot "$ROOT" systemctl set-default graphical.target',
  ],
  // tty0 for the virtual display, ttyS0 last so that it is /dev/console (the logs endpoint)
  kernelCmdline: 'root=/dev/vda rw rootfstype=ext4 rootflags=noinit_itable console=tty0 console=ttyS0,115200n8',
};
