// The Prometheus scrape endpoint: a listener of its own (never the API's), a token when one is
// configured, machines by status from the records, and the process's own figures; the rules that
// keep it off public addresses without a token.
import request from 'supertest';
import { ConfigError, loadConfig } from '../../src/config';
import { freshDatabaseUrl, FreshDatabase } from '../support/database';
import { TEST_IMAGE_DIR } from '../support/images';
import { freePort, ServiceProcess } from '../support/service-process';

jest.setTimeout(90_000);

describe('metrics configuration', () => {
  const base = { KISTE_DATA_DIR: '/tmp/kiste-metrics-config' };

  it('is off unless KISTE_METRICS_LISTEN is set', () => {
    expect(loadConfig(base).metrics).toBeNull();
    expect(loadConfig({ ...base, KISTE_METRICS_LISTEN: '127.0.0.1:9464' }).metrics).toEqual({ host: '127.0.0.1', port: 9464, token: null });
  });

  it('needs a token off loopback, and a token needs the listener', () => {
    expect(() => loadConfig({ ...base, KISTE_METRICS_LISTEN: '0.0.0.0:9464' })).toThrow(/needs KISTE_METRICS_TOKEN/);
    const token = 'a scrape token of some length';
    expect(loadConfig({ ...base, KISTE_METRICS_LISTEN: '0.0.0.0:9464', KISTE_METRICS_TOKEN: token }).metrics).toEqual({ host: '0.0.0.0', port: 9464, token });
    expect(() => loadConfig({ ...base, KISTE_METRICS_TOKEN: token })).toThrow(ConfigError);
    expect(() => loadConfig({ ...base, KISTE_METRICS_LISTEN: '127.0.0.1:9464', KISTE_METRICS_TOKEN: 'short' })).toThrow(/at least 16/);
    expect(() => loadConfig({ ...base, KISTE_METRICS_LISTEN: 'nonsense' })).toThrow(/KISTE_METRICS_LISTEN must be host:port/);
  });
});

describe('the scrape endpoint of a running service', () => {
  let fresh: FreshDatabase;
  let service: ServiceProcess | undefined;

  beforeAll(async () => {
    fresh = await freshDatabaseUrl();
  });
  afterAll(async () => {
    await service?.ensureStopped();
    await fresh?.cleanup();
  });

  it('serves machines by status and process figures behind its token, apart from the API', async () => {
    const [apiPort, metricsPort] = [await freePort(), await freePort()];
    const token = 'scrape-token-0123456789';
    service = new ServiceProcess({
      KISTE_LISTEN: `127.0.0.1:${apiPort}`, KISTE_DATA_DIR: fresh.dataDir, KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_ACCELERATOR: 'tcg',
      KISTE_METRICS_LISTEN: `127.0.0.1:${metricsPort}`, KISTE_METRICS_TOKEN: token, ...(fresh.url ? { KISTE_DATABASE_URL: fresh.url } : {}),
    });
    await service.listening();
    const scrape = request(`http://127.0.0.1:${metricsPort}`);
    await scrape.get('/metrics').expect(401);
    await scrape.get('/metrics').set('authorization', 'Bearer not-the-token-at-all').expect(401);
    await scrape.get('/').set('authorization', `Bearer ${token}`).expect(404);
    const res = await scrape.get('/metrics').set('authorization', `Bearer ${token}`).expect(200);
    expect(res.headers['content-type']).toMatch(/^text\/plain/);
    expect(res.text).toMatch(/^# TYPE kiste_machines gauge$/m);
    expect(res.text).toMatch(/^# TYPE kiste_operation_duration_seconds histogram$/m);
    expect(res.text).toMatch(/^# TYPE kiste_guest_links_dropped_total counter$/m);
    expect(res.text).toMatch(/^kiste_process_resident_memory_bytes \d+/m);
    // The API's listener does not serve it.
    await request(`http://127.0.0.1:${apiPort}`).get('/metrics').expect((r) => expect(r.text).not.toContain('kiste_machines'));
  });
});
