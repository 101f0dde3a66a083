// A profile is the whole recipe of one image: everything that decides what ends up in its root
// filesystem. The builder hashes it (canonical JSON) to key the rootfs cache and, together with the
// installed package versions and the agent bundle, to name the image version.

/** A file written into the root filesystem before the customize script runs. */
export interface ImageFile {
  /** absolute path inside the guest */
  path: string;
  content: string;
  /** octal permission bits, default 0o644 */
  mode?: number;
}

export interface Profile {
  name: string;
  description: string;
  /** Debian release, e.g. bookworm */
  suite: string;
  /** mmdebstrap --variant */
  variant: 'minbase' | 'required' | 'important' | 'standard';
  /** apt components */
  components: string[];
  /** Debian packages installed on top of the variant (mmdebstrap --include) */
  packages: string[];
  /**
   * Debian kernel metapackage. The host boots the kernel and initramfs copied out of the image
   * (direct kernel boot), so the builder holds the kernel packages in the guest.
   */
  kernelPackage: string;
  /** dpkg options kept in /etc/dpkg/dpkg.cfg.d (path-exclude for docs, man pages, …) */
  dpkgOptions: string[];
  /** files written into the rootfs (systemd units, drop-ins, configuration) */
  files: ImageFile[];
  /** units enabled with `systemctl enable` */
  enableUnits: string[];
  /** units masked with `systemctl mask` (not needed on a VM, or slow at boot) */
  maskUnits: string[];
  /** modules the initramfs must carry to mount the root disk (initramfs-tools MODULES=list) */
  initramfsModules: string[];
  /** extra shell lines run at the end of the customize step; the rootfs is in "$ROOT" */
  customize: string[];
  /** kernel command line the host should boot this image with */
  kernelCmdline: string;
  /**
   * The image has a screen (images/profiles/display.ts): the host gives its machines a display
   * device of this initial size. Absent: no display device (the builder writes `display: null`
   * into manifest.json, and so does an image built before this field existed: none).
   */
  display?: DisplaySpec;
}

/** The screen of an image: its size when a machine starts (the display device's preferred mode). */
export interface DisplaySpec {
  width: number;
  height: number;
}
