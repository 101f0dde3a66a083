// The image build's progress inside mmdebstrap: lines of a real `mmdebstrap --verbose` run (Debian
// 12, mmdebstrap 1.3.5) become "phase: packages N of M fetched/unpacked/set up"; apt-get update's
// index files are not counted as packages, another tool's "I:" line is a notice, not a phase, and
// lines it does not know change nothing.
import { MmdebstrapProgress } from '../../images/mmdebstrap-progress';

/** Every detail the lines produce, in order. */
function details(lines: string[]): string[] {
  const progress = new MmdebstrapProgress();
  return lines.map((line) => progress.line(line)).filter((detail): detail is string => detail !== null);
}

describe('mmdebstrap progress', () => {
  it('names the phase and counts packages fetched, unpacked and set up against those apt plans', () => {
    const seen = details([
      'I: running apt-get update...',
      'Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]',
      'Get:5 http://deb.debian.org/debian bookworm/main amd64 Packages [8790 kB]',
      'Fetched 9418 kB in 2s (5867 kB/s)',
      'I: downloading packages with apt...',
      'Reading package lists...',
      '  libbz2-1.0 libc6 libcap-ng0 libcap2 libcrypt1 libdb5.3 libdebconfclient0',
      '0 upgraded, 69 newly installed, 0 to remove and 0 not upgraded.',
      'Need to get 29.7 MB of archives.',
      'Get:1 http://security.debian.org/debian-security bookworm-security/main amd64 liblzma5 amd64 5.4.1-1+deb12u2 [206 kB]',
      'Get:2 http://deb.debian.org/debian bookworm/main amd64 gcc-12-base amd64 12.2.0-14+deb12u1 [37.6 kB]',
      'I: installing essential packages...',
      'Selecting previously unselected package gcc-12-base:amd64.',
      'Unpacking gcc-12-base:amd64 (12.2.0-14+deb12u1) ...',
      'Unpacking libc6:amd64 (2.36-9+deb12u14) ...',
      'Setting up gcc-12-base:amd64 (12.2.0-14+deb12u1) ...',
      'I: /initrd.img is now a symlink to boot/initrd.img-6.1.0-56-cloud-amd64',
      'Setting up gcc-12-base:amd64 (12.2.0-14+deb12u1) ...',
      "W: Couldn't identify type of root file system for fsck hook",
      "I: running --customize-hook in shell: sh -c '/bin/sh /tmp/x/customize.sh \"$1\"' exec /tmp/root",
    ]);
    expect(seen).toEqual([
      'running apt-get update',
      'downloading packages with apt',
      'downloading packages with apt',
      'downloading packages with apt: packages 1 of 69 fetched',
      'downloading packages with apt: packages 2 of 69 fetched',
      'installing essential packages',
      'installing essential packages: packages 1 of 69 unpacked',
      'installing essential packages: packages 2 of 69 unpacked',
      'installing essential packages: packages 2 of 69 unpacked, 1 of 69 set up',
      '/initrd.img is now a symlink to boot/initrd.img-6.1.0-56-cloud-amd64', // a notice: the counts go on
      'installing essential packages: packages 2 of 69 unpacked, 2 of 69 set up',
      "Couldn't identify type of root file system for fsck hook",
      'running --customize-hook',
    ]);
  });

  it('counts without a total until apt names one', () => {
    expect(details(['I: installing remaining packages inside the chroot...', 'Unpacking less (590-2.1~deb12u2) ...'])).toEqual([
      'installing remaining packages inside the chroot',
      'installing remaining packages inside the chroot: packages 1 unpacked',
    ]);
  });
});
