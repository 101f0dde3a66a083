// What every kiste image has in common: how it boots on kiste's QEMU command line (direct kernel
// boot, whole-disk ext4 on virtio-blk, serial console), how it reaches the network (user-mode NIC,
// DHCP through systemd-networkd), SSH with keys only, and the guest agent on its virtio-serial port.
import type { ImageFile } from './types';

/** The guest agent: bundled by agent/build.ts, copied here by the builder. */
export const AGENT_GUEST_PATH = '/opt/kiste/agent/kiste-agent.js';
/** Name of the virtio-serial port the host opens for the agent (/dev/virtio-ports/<name>). */
export const AGENT_PORT_NAME = 'org.kiste.agent';
/** Written by the builder into every image: {version, profile, created_at}. */
export const IMAGE_INFO_GUEST_PATH = '/etc/kiste/image.json';

export const BASE_SUITE = 'bookworm';

const SSH_HOST_KEYS_SCRIPT = '/usr/lib/kiste/ssh-host-keys';
const BOOT_REPORT_SCRIPT = '/usr/lib/kiste/boot-report';

/** Packages every profile installs (a bootable, reachable, agent-capable machine). */
export const BASE_PACKAGES = [
  'systemd-sysv',
  'udev',
  'dbus', // logind, hostnamed, timedated: `hostnamectl`, ssh sessions with a runtime dir
  'libpam-systemd',
  'systemd-resolved', // networkd has no resolv.conf writer of its own
  'openssh-server',
  'openssh-sftp-server', // scp (SFTP protocol) and sftp
  'iproute2',
  'netbase',
  'nodejs', // Debian's Node 18: runs the agent
  'ca-certificates',
  'procps',
  'less',
  'curl',
  'zstd', // initramfs-tools compresses with zstd when it is there (else gzip)
];

/** Units not wanted on a short-lived VM whose disk is a copy-on-write overlay. */
export const BASE_MASKED_UNITS = [
  'apt-daily.timer',
  'apt-daily-upgrade.timer',
  'apt-daily.service',
  'apt-daily-upgrade.service',
  'dpkg-db-backup.timer',
  'e2scrub_all.timer',
  'e2scrub_reap.service',
  'fstrim.timer',
  'systemd-pstore.service',
  // interactive locale/time zone/password prompts on a first boot: never on a kiste machine
  'systemd-firstboot.service',
  // nothing here needs network-online.target; when something does, it should not wait 2 minutes
  'systemd-networkd-wait-online.service',
];

export const BASE_ENABLED_UNITS = [
  'systemd-networkd.service',
  'systemd-resolved.service',
  'ssh.service',
  'serial-getty@ttyS0.service',
  'kiste-boot-report.service',
];

/** initramfs-tools MODULES=list: only what mounting root=/dev/vda needs (ext4 is built in). */
export const BASE_INITRAMFS_MODULES = ['virtio_pci', 'virtio_blk', 'virtio_scsi', 'sd_mod', 'virtio_console', 'ext4'];

/**
 * Kernel command line for the host. `rw`: no read-only mount + remount, and no fsck (ext4's
 * journal covers a killed VM). `rootflags=noinit_itable`: after the disk is grown, the kernel
 * would otherwise zero the new inode tables in the background, writing megabytes of zeros into
 * every instance's overlay; an overlay reads zeros there anyway.
 */
export const BASE_KERNEL_CMDLINE = 'root=/dev/vda rw rootfstype=ext4 rootflags=noinit_itable console=ttyS0,115200n8';

export const BASE_FILES: ImageFile[] = [
  {
    path: '/etc/fstab',
    content: [
      '# kiste: the root disk is a whole virtio disk (no partition table), an ext4 file system that',
      '# systemd-growfs grows to the size of the disk at every boot (x-systemd.growfs).',
      '/dev/vda  /  ext4  rw,noatime,noinit_itable,x-systemd.growfs  0  0',
      '',
    ].join('\n'),
  },
  {
    path: '/etc/hosts',
    content: [
      '127.0.0.1\tlocalhost',
      '::1\t\tlocalhost ip6-localhost ip6-loopback',
      'ff02::1\t\tip6-allnodes',
      'ff02::2\t\tip6-allrouters',
      '',
    ].join('\n'),
  },
  {
    path: '/etc/systemd/network/80-kiste-dhcp.network',
    content: [
      '# kiste: the user-mode NIC (virtio-net) gets its address by DHCP.',
      '[Match]',
      'Name=en* eth*',
      'Type=ether',
      '',
      '[Network]',
      'DHCP=ipv4',
      '',
      '[DHCPv4]',
      '# the host name is the instance name, set by the agent',
      'UseHostname=no',
      '',
    ].join('\n'),
  },
  {
    path: '/etc/ssh/sshd_config.d/kiste.conf',
    content: [
      '# kiste: keys only. root may log in, by key only.',
      'PasswordAuthentication no',
      'KbdInteractiveAuthentication no',
      'PermitRootLogin prohibit-password',
      'PubkeyAuthentication yes',
      'UseDNS no',
      'HostKey /etc/ssh/ssh_host_ed25519_key',
      'HostKey /etc/ssh/ssh_host_ecdsa_key',
      '',
    ].join('\n'),
  },
  {
    // The image carries no host keys: every machine must have its own, and the agent personalises
    // them. Until it has, sshd still has to start: Debian's unit runs `sshd -t` first, which fails
    // without keys, so the list of ExecStartPre commands is replaced (sshd checks its configuration
    // when it starts anyway; ExecReload keeps `sshd -t`).
    path: '/etc/systemd/system/ssh.service.d/kiste-host-keys.conf',
    content: ['[Service]', 'ExecStartPre=', `ExecStartPre=${SSH_HOST_KEYS_SCRIPT}`, ''].join('\n'),
  },
  {
    path: SSH_HOST_KEYS_SCRIPT,
    mode: 0o755,
    content: [
      '#!/bin/sh',
      '# kiste: makes the SSH host keys sshd uses when the agent has not (yet) given this machine its own.',
      '# Ed25519 and ECDSA only: an RSA key takes seconds to generate on an emulated CPU.',
      '# A key file that is there but unreadable (empty after a crash) is made anew: sshd would not start.',
      'set -e',
      'for type in ed25519 ecdsa; do',
      '  key=/etc/ssh/ssh_host_${type}_key',
      '  if ! ssh-keygen -y -f "$key" >/dev/null 2>&1; then',
      '    rm -f "$key" "$key.pub"',
      '    ssh-keygen -q -t "$type" -N "" -C "" -f "$key"',
      '  fi',
      'done',
      '',
    ].join('\n'),
  },
  {
    // one line on the serial console once the machine is up: systemd stops printing unit status
    // there as soon as the serial getty owns the console, so nothing else says that sshd started
    path: '/etc/systemd/system/kiste-boot-report.service',
    content: [
      '[Unit]',
      'Description=kiste boot report on the serial console',
      'After=multi-user.target ssh.service',
      '',
      '[Service]',
      'Type=oneshot',
      `ExecStart=${BOOT_REPORT_SCRIPT}`,
      'StandardOutput=tty',
      'TTYPath=/dev/console',
      '',
      '[Install]',
      'WantedBy=multi-user.target',
      '',
    ].join('\n'),
  },
  {
    path: BOOT_REPORT_SCRIPT,
    mode: 0o755,
    content: [
      '#!/bin/sh',
      '# kiste: prints e.g. "kiste-boot: up 19.8s, ssh.service active, / ext4 3.9G (1%), image v2026.01.02-0123abcd"',
      'up=$(cut -d" " -f1 /proc/uptime)',
      'ssh=$(systemctl is-active ssh.service)',
      'root=$(df -h --output=fstype,size,pcent / | tail -n 1 | tr -s " " | sed "s/^ //")',
      `image=$(sed -n 's/.*"version":"\\([^"]*\\)".*/\\1/p' ${IMAGE_INFO_GUEST_PATH} 2>/dev/null)`,
      'echo "kiste-boot: up ${up}s, ssh.service ${ssh}, / ${root}, image ${image:-unknown}"',
      '',
    ].join('\n'),
  },
  {
    path: '/etc/systemd/journald.conf.d/kiste.conf',
    content: ['[Journal]', 'Storage=volatile', 'RuntimeMaxUse=32M', ''].join('\n'),
  },
  {
    path: '/etc/systemd/system/kiste-agent.service',
    content: [
      '[Unit]',
      'Description=kiste guest agent',
      // no [Install]: udev starts it when the host gives the machine the agent port (rule below),
      // so a VM started without the port has no agent restarting in a loop
      'After=dev-virtio\\x2dports-org.kiste.agent.device',
      'StartLimitIntervalSec=0',
      '',
      '[Service]',
      `ExecStart=/usr/bin/node ${AGENT_GUEST_PATH}`,
      'Restart=always',
      'RestartSec=1',
      '',
    ].join('\n'),
  },
  {
    path: '/etc/udev/rules.d/90-kiste-agent.rules',
    content: [
      '# kiste: start the agent as soon as its virtio-serial port appears.',
      `SUBSYSTEM=="virtio-ports", ATTR{name}=="${AGENT_PORT_NAME}", TAG+="systemd", ENV{SYSTEMD_WANTS}+="kiste-agent.service"`,
      '',
    ].join('\n'),
  },
  {
    path: '/etc/initramfs-tools/conf.d/kiste.conf',
    content: ['# kiste: a small initramfs with only the drivers of kiste\'s virtual hardware', 'MODULES=list', ''].join('\n'),
  },
  {
    // initramfs hook rather than /etc/initramfs-tools/modules: that file is a conffile of
    // initramfs-tools, and editing it makes later upgrades in the guest ask questions.
    path: '/etc/initramfs-tools/hooks/kiste',
    mode: 0o755,
    content: [
      '#!/bin/sh',
      'PREREQ=""',
      'prereqs() { echo "$PREREQ"; }',
      'case "$1" in prereqs) prereqs; exit 0 ;; esac',
      '. /usr/share/initramfs-tools/hook-functions',
      `for m in ${BASE_INITRAMFS_MODULES.join(' ')}; do force_load "$m"; done`,
      '',
    ].join('\n'),
  },
];

/**
 * Lines run by the customize step for every profile, after the profile's files are in place.
 * "$ROOT" is the root filesystem; commands inside it run with chroot.
 */
export const BASE_CUSTOMIZE = [
  // each clone generates its own machine id at first boot (empty file: "not a first boot", so no
  // systemd-firstboot prompts; systemd still generates and commits an id)
  ': > "$ROOT/etc/machine-id"',
  'rm -f "$ROOT/var/lib/dbus/machine-id"',
  // no host name until the agent sets the instance name (systemd falls back to "localhost")
  ': > "$ROOT/etc/hostname"',
  'chmod 644 "$ROOT/etc/hostname"',
  // no SSH host keys baked in; ssh.service generates them if the agent has not yet
  'rm -f "$ROOT"/etc/ssh/ssh_host_*',
  'rm -rf "$ROOT/var/log/journal"',
  // systemd-resolved is ordered before sysinit.target, so every service waits for it (seconds
  // under TCG) though nothing needs names resolved that early. A drop-in cannot remove Before=, so
  // /etc gets a copy of the installed unit without it, wanted by multi-user.target instead.
  'rm -f "$ROOT/etc/systemd/system/sysinit.target.wants/systemd-resolved.service"',
  `{ echo "# kiste: $(chroot "$ROOT" dpkg-query -W -f '\${Version}' systemd-resolved) unit, not ordered before sysinit.target"; sed -e 's/^Before=sysinit.target /Before=/' -e 's/^WantedBy=sysinit.target$/WantedBy=multi-user.target/' "$ROOT/lib/systemd/system/systemd-resolved.service"; } > "$ROOT/etc/systemd/system/systemd-resolved.service"`,
  'grep -q "^Before=network.target" "$ROOT/etc/systemd/system/systemd-resolved.service"',
  'chroot "$ROOT" systemctl enable --quiet systemd-resolved.service',
];
