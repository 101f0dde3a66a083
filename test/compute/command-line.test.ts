// The QEMU argv of a machine: the devices and options the rest of the driver relies on.
import { AGENT_PORT_NAME, buildQemuArgs, DISK_DEVICE, DISK_NODE, DISPLAY_VGAMEM_MIB, MachineSpec, optionValue, VDAGENT_PORT_NAME } from '../../src/compute/qemu/command-line';
import { DISPLAY_MAX } from '../../src/compute/machine-display';

const spec: MachineSpec = {
  id: 'abc-123',
  vcpu: 2,
  memoryMib: 1024,
  kernel: '/images/v1/vmlinuz',
  initrd: '/images/v1/initrd.img',
  disk: '/data/machines/abc-123/disk.qcow2',
  appendArgs: 'root=/dev/vda console=ttyS0',
  accelerator: 'tcg',
  qmpSocket: '/data/machines/abc-123/qmp.sock',
  agentSocket: '/data/machines/abc-123/agent.sock',
  serialLog: '/data/machines/abc-123/serial.log',
  pidFile: '/data/machines/abc-123/qemu.pid',
};

/** The value following `flag`, for every occurrence. */
function values(args: string[], flag: string): string[] {
  return args.flatMap((a, i) => (a === flag ? [args[i + 1]] : []));
}

describe('buildQemuArgs', () => {
  test('a TCG machine: q35, no defaults, shape, direct kernel boot', () => {
    const args = buildQemuArgs(spec);
    expect(args.slice(0, 2)).toEqual(['-name', 'kiste-abc-123']);
    expect(args).toEqual(expect.arrayContaining(['-nodefaults', '-no-user-config']));
    expect(values(args, '-display')).toEqual(['none']);
    expect(values(args, '-machine')).toEqual(['q35']);
    expect(values(args, '-accel')).toEqual(['tcg,thread=multi,tb-size=256']);
    expect(args).not.toContain('-cpu');
    expect(values(args, '-smp')).toEqual(['2']);
    expect(values(args, '-m')).toEqual(['1024M']);
    expect(values(args, '-kernel')).toEqual([spec.kernel]);
    expect(values(args, '-initrd')).toEqual([spec.initrd]);
    expect(values(args, '-append')).toEqual([spec.appendArgs]);
    expect(args).not.toContain('-incoming');
    expect(args).not.toContain('-daemonize');
  });

  test('KVM uses the host CPU', () => {
    const args = buildQemuArgs({ ...spec, accelerator: 'kvm' });
    expect(values(args, '-accel')).toEqual(['kvm']);
    expect(values(args, '-cpu')).toEqual(['host']);
  });

  test('disk as named blockdev nodes on virtio-blk; agent port; user networking without forwards; serial, QMP, pid file', () => {
    const args = buildQemuArgs(spec);
    expect(values(args, '-blockdev')).toEqual([
      `driver=file,node-name=${DISK_NODE}-file,filename=${spec.disk},discard=unmap`,
      `driver=qcow2,node-name=${DISK_NODE},file=${DISK_NODE}-file,discard=unmap`,
    ]);
    const devices = values(args, '-device');
    expect(devices).toContain(`virtio-blk-pci,drive=${DISK_NODE},id=${DISK_DEVICE}`);
    expect(devices).toContain('virtio-serial-pci,id=vser0');
    expect(devices).toContain(`virtserialport,bus=vser0.0,chardev=agent,name=${AGENT_PORT_NAME}`);
    expect(devices).toContain('virtio-net-pci,netdev=net0');
    expect(values(args, '-netdev')).toEqual(['user,id=net0']); // no hostfwd: nothing listens on the host
    const chardevs = values(args, '-chardev');
    expect(chardevs).toContain(`socket,id=agent,path=${spec.agentSocket},server=on,wait=off`);
    expect(chardevs).toContain(`file,id=serial0,path=${spec.serialLog},append=on`);
    expect(chardevs).toContain(`socket,id=qmp,path=${spec.qmpSocket},server=on,wait=off`);
    expect(values(args, '-serial')).toEqual(['chardev:serial0']);
    expect(values(args, '-mon')).toEqual(['chardev=qmp,mode=control']);
    expect(values(args, '-pidfile')).toEqual([spec.pidFile]);
  });

  test('file-backed RAM and incoming migration', () => {
    const args = buildQemuArgs({ ...spec, memoryFile: '/data/machines/abc-123/memory.ram', incoming: true });
    expect(values(args, '-machine')).toEqual(['q35,memory-backend=mem']);
    expect(values(args, '-object')).toEqual(['memory-backend-file,id=mem,size=1024M,mem-path=/data/machines/abc-123/memory.ram,share=on']);
    expect(values(args, '-m')).toEqual(['1024M']);
    expect(values(args, '-incoming')).toEqual(['defer']);
  });

  test('commas in paths are escaped for QEMU option strings', () => {
    expect(optionValue('/a,b/c')).toBe('/a,,b/c');
    const args = buildQemuArgs({ ...spec, disk: '/data/odd,name/disk.qcow2' });
    expect(values(args, '-blockdev')[0]).toBe(`driver=file,node-name=${DISK_NODE}-file,filename=/data/odd,,name/disk.qcow2,discard=unmap`);
  });

  test('rejects what would break QEMU or the driver', () => {
    expect(() => buildQemuArgs({ ...spec, id: 'a,b' })).toThrow(/machine id/);
    expect(() => buildQemuArgs({ ...spec, vcpu: 0 })).toThrow(/vcpu/);
    expect(() => buildQemuArgs({ ...spec, memoryMib: 1.5 })).toThrow(/memoryMib/);
    expect(() => buildQemuArgs({ ...spec, disk: 'relative.qcow2' })).toThrow(/absolute/);
    expect(() => buildQemuArgs({ ...spec, qmpSocket: `/${'x'.repeat(120)}/qmp.sock` })).toThrow(/unix socket limit/);
  });

  test('no display: no display device, no input devices, no VNC server', () => {
    const args = buildQemuArgs(spec);
    expect(values(args, '-device').filter((d) => /display|vga|tablet|keyboard|virtio-gpu/.test(d))).toEqual([]);
    expect(args).not.toContain('-vnc');
    expect(values(args, '-chardev').filter((c) => c.startsWith('qemu-vdagent'))).toEqual([]);
  });

  test('a screen: bochs-display of the initial size, virtio tablet and keyboard, VNC on a unix socket', () => {
    const socket = '/data/machines/abc-123/run/display.sock';
    const args = buildQemuArgs({ ...spec, display: { socket, width: 1280, height: 720 } });
    expect(values(args, '-display')).toEqual(['none']); // no window: the VNC server is the only way in
    const devices = values(args, '-device');
    expect(devices).toContain(`bochs-display,id=display0,vgamem=${DISPLAY_VGAMEM_MIB}M,xres=1280,yres=720,xmax=2560,ymax=1600`);
    expect(devices).toContain('virtio-tablet-pci,id=tablet0');
    expect(devices).toContain('virtio-keyboard-pci,id=keyboard0');
    expect(values(args, '-vnc')).toEqual([`unix:${socket},share=force-shared,lossy=off`]);
    // the device's memory holds two frames of the largest screen (bochs-drm double-buffers)
    expect(DISPLAY_VGAMEM_MIB * 1024 * 1024).toBeGreaterThanOrEqual(2 * DISPLAY_MAX.width * DISPLAY_MAX.height * 4);
    expect(devices.filter((d) => d.includes(VDAGENT_PORT_NAME))).toEqual([]); // no clipboard unless asked
    expect(values(args, '-vnc')).toEqual(values(buildQemuArgs({ ...spec, display: { socket, width: 1280, height: 720 }, incoming: true }), '-vnc'));
  });

  test('the clipboard: QEMU\'s vdagent on the virtio-serial bus', () => {
    const args = buildQemuArgs({ ...spec, display: { socket: '/run/d.sock', width: 1024, height: 768, clipboard: true } });
    expect(values(args, '-chardev')).toContain('qemu-vdagent,id=vdagent,clipboard=on');
    expect(values(args, '-device')).toContain(`virtserialport,bus=vser0.0,chardev=vdagent,name=${VDAGENT_PORT_NAME}`);
  });

  test('display: sizes are bounded integers, the socket path absolute, short and escaped', () => {
    const display = { socket: '/run/d.sock', width: 1280, height: 720 };
    expect(() => buildQemuArgs({ ...spec, display: { ...display, width: 1280.5 } })).toThrow(/display width/);
    expect(() => buildQemuArgs({ ...spec, display: { ...display, height: 0 } })).toThrow(/display height/);
    expect(() => buildQemuArgs({ ...spec, display: { ...display, width: 4096 } })).toThrow(/display width/);
    expect(() => buildQemuArgs({ ...spec, display: { ...display, socket: 'd.sock' } })).toThrow(/absolute/);
    expect(() => buildQemuArgs({ ...spec, display: { ...display, socket: `/${'x'.repeat(120)}/d.sock` } })).toThrow(/unix socket limit/);
    expect(values(buildQemuArgs({ ...spec, display: { ...display, socket: '/a,b/d.sock' } }), '-vnc')).toEqual(['unix:/a,,b/d.sock,share=force-shared,lossy=off']);
  });
});
