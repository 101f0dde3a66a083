// The minimal image: no desktop, boots fast. Used by the test suite and selectable for small hosts.
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

/** Documentation, man pages and translations are left out (dpkg keeps excluding them on upgrades). */
export const SLIM_DPKG_OPTIONS = [
  'path-exclude=/usr/share/man/*',
  'path-exclude=/usr/share/info/*',
  'path-exclude=/usr/share/doc/*',
  'path-include=/usr/share/doc/*/copyright',
  'path-exclude=/usr/share/locale/*',
  'path-include=/usr/share/locale/locale.alias',
];

/**
 * The minimal set: every profile's packages plus git (machines clone repositories with it; the
 * minimal image is the test suite's universal image). desktop-lite is this set plus a screen.
 */
export const MINIMAL_PACKAGES = [...BASE_PACKAGES, 'git'];

export const minimal: Profile = {
  name: 'minimal',
  description: 'Debian bookworm minbase, systemd, OpenSSH, Node 18, git and the kiste agent; no desktop',
  suite: BASE_SUITE,
  variant: 'minbase',
  components: ['main'],
  kernelPackage: 'linux-image-cloud-amd64',
  packages: [...MINIMAL_PACKAGES],
  dpkgOptions: SLIM_DPKG_OPTIONS,
  files: [...BASE_FILES],
  enableUnits: [...BASE_ENABLED_UNITS],
  // the cloud kernel has no DRM drivers
  maskUnits: [...BASE_MASKED_UNITS, 'modprobe@drm.service'],
  initramfsModules: [...BASE_INITRAMFS_MODULES],
  customize: [...BASE_CUSTOMIZE],
  kernelCmdline: BASE_KERNEL_CMDLINE,
};
