// How the service hands out the built web console and CLI download (built into dist/ before the
// tests): every console address answers the app shell with the console's security headers and no
// caching; hashed assets are cached for good; a missing file is a 404 in the envelope, a missing
// build a 503 P12 that says what to run.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import request from 'supertest';
import { packageRoot } from '../../src/db/migrate';
import { DistFiles } from '../../src/built-files';
import { startTestService, TestService } from '../support/harness';

const DIST = join(packageRoot(), 'dist');

function assetsOfShell(html: string): string[] {
  return [...html.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((match) => match[1]!);
}

describe('console and downloads as served', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService();
  });
  afterAll(() => t.close());

  it.each(['/', '/console/login', '/console/keys', '/console/machines/web-1', '/console/oauth/approve?state=x'])(
    'GET %s answers the app shell with a strict policy, not cached',
    async (path) => {
      const res = await request(t.app).get(path).expect(200);
      expect(res.headers['content-type']).toBe('text/html; charset=utf-8');
      expect(res.text).toBe(readFileSync(join(DIST, 'console', 'index.html'), 'utf8'));
      expect(res.headers['cache-control']).toBe('no-cache');
      const csp = res.headers['content-security-policy'] as string;
      expect(csp.split('; ')).toEqual(expect.arrayContaining(["script-src 'self'", "frame-ancestors 'none'", "connect-src 'self'", "object-src 'none'"]));
      expect(csp).not.toMatch(/script-src[^;]*unsafe/);
      expect(res.headers['x-frame-options']).toBe('DENY');
      expect(res.headers['x-content-type-options']).toBe('nosniff');
      expect(res.headers['x-request-id']).toBeTruthy();
    },
  );

  it('the shell loads only its own hashed files: no inline script, nothing from elsewhere', async () => {
    const html = (await request(t.app).get('/').expect(200)).text;
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/); // every script has a src
    expect(html).not.toMatch(/(?:src|href)="(?:https?:)?\/\//);
    const assets = assetsOfShell(html);
    expect(assets.some((path) => path.endsWith('.js'))).toBe(true);
    expect(assets.some((path) => path.endsWith('.css'))).toBe(true);
    for (const path of assets) {
      expect(path).toMatch(/^\/assets\/[\w-]+-[\w-]{8}\.(js|css)$/);
      const res = await request(t.app).get(path).expect(200);
      expect(res.headers['cache-control']).toBe('public, max-age=31536000, immutable');
      expect(res.headers['content-type']).toBe(path.endsWith('.js') ? 'text/javascript; charset=utf-8' : 'text/css; charset=utf-8');
      expect(res.text).toBe(readFileSync(join(DIST, 'console', path), 'utf8'));
    }
  });

  it('an unknown asset is 404 P05; a name that tries to leave the folder is refused', async () => {
    const missing = await request(t.app).get('/assets/index-00000000.js').expect(404);
    expect(missing.body.error).toMatchObject({ code: 'P05' });
    for (const path of ['/assets/..%2F..%2Fpackage.json', '/assets/.hidden', '/assets/%2Fetc%2Fpasswd']) {
      const res = await request(t.app).get(path);
      expect([400, 404]).toContain(res.status);
      expect(res.body.error.code).toMatch(/^P0[15]$/);
    }
  });

  it('an unknown console section still answers the shell (the app says "not found"), other paths stay 404', async () => {
    await request(t.app).get('/console/no-such-page').expect(200);
    const api = await request(t.app).get('/v1/no-such-thing').expect(404);
    expect(api.body.error.code).toBe('P05');
    const deep = await request(t.app).get('/console/a/b/c').expect(404);
    expect(deep.body.error.code).toBe('P05');
  });

  it('serves the CLI bundle built at build time', async () => {
    const res = await request(t.app).get('/downloads/kiste.js').expect(200);
    expect(res.text).toBe(readFileSync(join(DIST, 'downloads', 'kiste.js'), 'utf8'));
    expect(res.text.startsWith('#!/usr/bin/env node')).toBe(true);
  });
});

describe('a service started without a build', () => {
  let t: TestService;
  let empty: string;
  beforeAll(async () => {
    empty = mkdtempSync(join(tmpdir(), 'kiste-no-dist-'));
    t = await startTestService({ builtFiles: new DistFiles(empty) });
  });
  afterAll(async () => {
    await t.close();
    rmSync(empty, { recursive: true, force: true });
  });

  it.each(['/', '/console/login', '/assets/index-12345678.js', '/downloads/kiste.js'])('GET %s answers 503 P12 naming the build', async (path) => {
    const res = await request(t.app).get(path).expect(503);
    expect(res.body.error).toMatchObject({ code: 'P12', type: 'build_missing' });
    expect(res.body.error.hint).toContain('npm run build');
    expect(res.body.error.message).toMatch(/dist\/(console|downloads)/);
  });

  it('the API itself works without it', async () => {
    await request(t.app).get('/healthz').expect(200);
  });
});
