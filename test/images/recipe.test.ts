// The parts of the image pipeline that need neither root nor QEMU: versions, hashes, profiles.
import { canonicalJson, contentHash, imageVersion, recipeHash } from '../../images/build-image';
import { AGENT_GUEST_PATH, AGENT_PORT_NAME } from '../../images/profiles/base';
import { getProfile, PROFILES } from '../../images/profiles';
import { DESKTOP_UNIT, DESKTOP_USER, DISPLAY_SERVER_UNIT } from '../../images/profiles/desktop';

describe('image versions', () => {
  test('vYYYY.MM.DD-hash8 with the UTC build date', () => {
    expect(imageVersion(new Date('2026-01-02T23:59:59Z'), '0123abcd')).toBe('v2026.01.02-0123abcd');
    expect(imageVersion(new Date('2026-12-31T00:00:00+02:00'), 'ffffffff')).toBe('v2026.12.30-ffffffff');
  });

  test('the hash depends on recipe, package versions and agent bytes only', () => {
    const minimal = getProfile('minimal');
    const packages = ['nodejs=18.20.4+dfsg-1~deb12u1', 'bash=5.2.15-2+b7'];
    const agent = Buffer.from('console.log(1)\n');
    const h = contentHash(minimal, packages, agent);
    expect(h).toMatch(/^[0-9a-f]{8}$/);
    expect(contentHash(minimal, [...packages].reverse(), Buffer.from(agent))).toBe(h);
    expect(contentHash(minimal, packages, Buffer.from('console.log(2)\n'))).not.toBe(h);
    expect(contentHash(minimal, ['nodejs=18.20.4+dfsg-1~deb12u2', 'bash=5.2.15-2+b7'], agent)).not.toBe(h);
    expect(contentHash(getProfile('desktop'), packages, agent)).not.toBe(h);
  });

  test('recipe hashes are stable and differ between profiles', () => {
    expect(recipeHash(getProfile('minimal'))).toBe(recipeHash(getProfile('minimal')));
    expect(recipeHash(getProfile('minimal'))).not.toBe(recipeHash(getProfile('desktop')));
    expect(canonicalJson({ b: 1, a: [{ d: 2, c: 3 }] })).toBe('{"a":[{"c":3,"d":2}],"b":1}');
  });
});

describe('profiles', () => {
  test('unknown profiles are refused', () => {
    expect(() => getProfile('nope')).toThrow(/unknown image profile "nope"/);
  });

  test.each(Object.keys(PROFILES))('%s boots on kiste and runs the agent', (name) => {
    const p = getProfile(name);
    expect(p.kernelCmdline).toMatch(/root=\/dev\/vda/);
    expect(p.kernelCmdline).toMatch(/console=ttyS0/);
    for (const pkg of ['systemd-sysv', 'udev', 'openssh-server', 'iproute2', 'nodejs', 'ca-certificates', 'procps', 'less', 'curl']) {
      expect(p.packages).toContain(pkg);
    }
    for (const file of p.files) expect(file.path.startsWith('/')).toBe(true);
    const unit = p.files.find((f) => f.path === '/etc/systemd/system/kiste-agent.service')?.content ?? '';
    expect(unit).toContain(`ExecStart=/usr/bin/node ${AGENT_GUEST_PATH}`);
    expect(unit).toContain('Restart=always');
    const rule = p.files.find((f) => f.path.startsWith('/etc/udev/rules.d/'))?.content ?? '';
    expect(rule).toContain(`ATTR{name}=="${AGENT_PORT_NAME}"`);
    const sshd = p.files.find((f) => f.path === '/etc/ssh/sshd_config.d/kiste.conf')?.content ?? '';
    expect(sshd).toMatch(/^PasswordAuthentication no$/m);
    expect(sshd).toMatch(/^PermitRootLogin prohibit-password$/m);
    expect(p.maskUnits).toEqual(expect.arrayContaining(['apt-daily.timer', 'apt-daily-upgrade.timer', 'e2scrub_all.timer', 'fstrim.timer']));
  });

  test('minimal has no desktop and no screen; desktop runs Xfce on the screen the host gives it', () => {
    const minimal = getProfile('minimal');
    const desktop = getProfile('desktop');
    expect(minimal.packages.filter((p) => /xfce|xserver|xvfb|lightdm|x11/.test(p))).toEqual([]);
    expect(minimal.kernelPackage).toBe('linux-image-cloud-amd64');
    // no display field at all: the minimal recipe (and with it its cached root filesystem) is as before
    expect('display' in minimal).toBe(false);
    expect(desktop.display).toEqual({ width: 1280, height: 720 });
    expect(desktop.packages).toEqual(expect.arrayContaining(['xfce4', 'xserver-xorg-core', 'xserver-xorg-input-libinput', 'xauth', 'xdotool', 'xclip', 'dbus-x11', 'sudo', 'git', 'build-essential', 'python3']));
    expect(desktop.packages).not.toContain('xvfb');
    expect(desktop.packages.filter((p) => /^lightdm|^gdm|^sddm/.test(p))).toEqual([]);
    expect(desktop.kernelCmdline).toMatch(/console=ttyS0/);
    const unit = desktop.files.find((f) => f.path === `/etc/systemd/system/${DESKTOP_UNIT}`)?.content ?? '';
    expect(unit).toMatch(new RegExp(`^User=${DESKTOP_USER}$`, 'm'));
    expect(unit).toMatch(new RegExp(`^BindsTo=${DISPLAY_SERVER_UNIT}$`, 'm'));
    expect(unit).toMatch(/^WantedBy=graphical\.target$/m);
    // the whole session stays in the unit's cgroup (a restart stops the old clients)
    expect(unit).not.toMatch(/^PAMName=/m);
    expect(desktop.enableUnits).toEqual(expect.arrayContaining([DESKTOP_UNIT, DISPLAY_SERVER_UNIT, 'getty@tty1.service']));
    expect(desktop.customize).toContain('chroot "$ROOT" systemctl set-default graphical.target');
    const session = desktop.files.find((f) => unit.includes(`ExecStart=${f.path}`))?.content ?? '';
    expect(session).toMatch(/^exec startxfce4$/m);
  });

  test.each(['desktop', 'desktop-lite'])('%s: Xorg on the display device, with the DRM driver the cloud kernel lacks', (name) => {
    const p = getProfile(name);
    expect(p.kernelPackage).toBe('linux-image-amd64');
    expect(p.maskUnits).not.toContain('modprobe@drm.service'); // udev loads bochs
    expect(p.dpkgOptions).toEqual(expect.arrayContaining(['path-exclude=/lib/modules/*/kernel/sound/*', 'path-exclude=/lib/modules/*/kernel/drivers/gpu/drm/amd/*']));
    expect(p.dpkgOptions.filter((o) => /drm\/tiny|drivers\/(virtio|input|hid)|\/drm\/\*/.test(o))).toEqual([]);
    const server = p.files.find((f) => f.path === `/etc/systemd/system/${DISPLAY_SERVER_UNIT}`)?.content ?? '';
    expect(server).toMatch(/^After=multi-user\.target/m); // never delays SSH and the agent
    expect(server).toMatch(/^ExecStartPost=/m); // active once X accepts connections
    const script = p.files.find((f) => server.includes(`ExecStart=${f.path}`))?.content ?? '';
    expect(script).toMatch(/^exec Xorg :0 vt7 -auth \S+ -nolisten tcp -s 0 -dpms /m);
    // the X cookie holds for any host name: the agent renames the machine while the display starts
    expect(script).toContain('sed -e "s/^..../ffff/"');
    expect(script).toContain(`runuser -u ${DESKTOP_USER} --`); // the user's copy is written as the user
    expect(p.files.find((f) => f.path === '/etc/X11/xorg.conf.d/10-kiste.conf')?.content).toMatch(/Driver "modesetting"/);
  });

  test('desktop-lite: the slim minimal set, an xterm for a session, no desktop environment', () => {
    const lite = getProfile('desktop-lite');
    expect(lite.display).toEqual({ width: 1280, height: 720 });
    expect(lite.packages).toContain('xterm');
    expect(lite.packages.filter((p) => /xfce|gnome|kde|lxde|xvfb/.test(p))).toEqual([]);
    expect(lite.dpkgOptions).toEqual(expect.arrayContaining(getProfile('minimal').dpkgOptions));
    const session = lite.files.find((f) => f.path === '/usr/lib/kiste/desktop-session')?.content ?? '';
    expect(session).toMatch(/^xterm /m);
  });
});
