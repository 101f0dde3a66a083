// The local worker's environment: the compute part of the service's configuration, and none of the
// control plane's secrets (a worker taken over through a guest must not learn the database's
// address, the installation's key or a relay's password).
import { loadConfig } from '../../src/config';
import { workerEnvironment } from '../../src/compute/local-worker-compute';

const SECRETS = {
  KISTE_DATABASE_URL: 'postgresql://kiste:database-password@127.0.0.1:5432/kiste',
  KISTE_SECRET_KEY: 'installation-secret-key-value',
  KISTE_SMTP_URL: 'smtp://alerts:relay-password@relay.example.com:587',
  KISTE_TURN_URLS: 'turn:turn.example.com:3478',
  KISTE_TURN_SECRET: 'turn-shared-secret-value',
  KISTE_ADMIN_EMAIL: 'admin@example.com',
  KISTE_ADMIN_PASSWORD: 'admin-password-value',
  KISTE_METRICS_LISTEN: '127.0.0.1:9464',
  KISTE_METRICS_TOKEN: 'metrics-token-value-long',
  KISTE_WORKER_SOCKET: '/tmp/elsewhere.sock',
};

describe('the local worker environment', () => {
  const saved = { ...process.env };
  afterEach(() => {
    process.env = { ...saved };
  });

  it('carries the compute settings and none of the control plane secrets', () => {
    Object.assign(process.env, SECRETS, { PGPASSWORD: 'pg-password-value', AWS_SECRET_ACCESS_KEY: 'aws-secret-value', KISTE_DEBIAN_MIRROR: 'http://mirror.example.com/debian', KISTE_QEMU_BINARY: '/opt/qemu/bin/qemu-system-x86_64', PATH: '/usr/bin:/bin' });
    const config = loadConfig({
      ...SECRETS,
      KISTE_DATA_DIR: '/srv/kiste', KISTE_IMAGE_PROFILE: 'minimal', KISTE_BOOT_SNAPSHOTS: 'off', KISTE_MACHINE_EGRESS_ALLOW: '10.20.0.0/16,2001:db8::/32',
      KISTE_MACHINE_UID_BASE: '1879048192', KISTE_LOG_LEVEL: 'debug',
    });
    const env = workerEnvironment(config, 'tcg');
    expect(env).toMatchObject({
      KISTE_DATA_DIR: '/srv/kiste', KISTE_IMAGE_DIR: '/srv/kiste/images', KISTE_IMAGE_PROFILE: 'minimal', KISTE_BOOT_SNAPSHOTS: 'off',
      KISTE_ACCELERATOR: 'tcg', KISTE_MACHINE_EGRESS: 'public',
      KISTE_MACHINE_UID_BASE: '1879048192', KISTE_LOG_LEVEL: 'debug',
      KISTE_DEBIAN_MIRROR: 'http://mirror.example.com/debian', KISTE_QEMU_BINARY: '/opt/qemu/bin/qemu-system-x86_64', PATH: '/usr/bin:/bin',
    });
    // The allowed networks as the worker's own configuration reads them back.
    expect(loadConfig(env).machineEgress).toEqual(config.machineEgress);
    for (const name of Object.keys(SECRETS)) expect(env).not.toHaveProperty(name);
    const values = Object.values(env).join('\n');
    for (const secret of ['pg-password-value', 'aws-secret-value', 'database-password', 'installation-secret-key-value', 'relay-password', 'turn-shared-secret-value', 'admin-password-value', 'metrics-token-value-long']) {
      expect(values).not.toContain(secret);
    }
  });

  it('leaves out what is unset', () => {
    const env = workerEnvironment(loadConfig({ KISTE_DATA_DIR: '/srv/kiste' }), 'kvm');
    expect(env).not.toHaveProperty('KISTE_IMAGE_CACHE_DIR');
    expect(env).not.toHaveProperty('KISTE_MACHINE_EGRESS_ALLOW');
    expect(env.KISTE_ACCELERATOR).toBe('kvm');
  });
});
