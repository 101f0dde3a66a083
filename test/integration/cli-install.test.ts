// /install.sh into a temporary prefix, then the installed `kiste` (the bundle from /downloads/kiste.js
// and a launcher that defaults to this service) answers --version and whoami. /install.ps1 is served
// for this service too (no PowerShell on these machines to run it: its text is checked).
import { createServer, Server } from 'node:http';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { apiKeyFor, createAccount, startTestService, TestService } from '../support/harness';
import { cliEnv, runProgram } from '../support/kiste-cli';
import { freePort } from '../support/service-process';

describe('CLI installers', () => {
  let t: TestService;
  let server: Server;
  let url: string;
  let dir: string;
  const cleanEnv = () => cliEnv();
  const run = runProgram;

  beforeAll(async () => {
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    t = await startTestService({ env: { KISTE_BASE_URL: url } });
    server = createServer(t.app);
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    dir = mkdtempSync(join(tmpdir(), 'kiste-install-'));
  });
  afterAll(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('install.sh installs a kiste that works against this service', async () => {
    const res = await fetch(`${url}/install.sh`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/x-shellscript/);
    const script = await res.text();
    expect(script).toContain(`BASE='${url}'`);
    writeFileSync(join(dir, 'install.sh'), script);

    const prefix = join(dir, 'prefix');
    const installed = await run('sh', [join(dir, 'install.sh')], { ...cleanEnv(), KISTE_PREFIX: prefix });
    expect(installed.stderr).toBe('');
    expect(installed.code).toBe(0);
    expect(installed.stdout).toContain(`kiste: installed 0.1.0 as ${prefix}/bin/kiste`);
    expect(statSync(join(prefix, 'bin/kiste')).mode & 0o111).not.toBe(0);

    const kiste = join(prefix, 'bin/kiste');
    expect(await run(kiste, ['--version'], cleanEnv())).toMatchObject({ code: 0, stdout: '0.1.0\n' });
    const account = await createAccount(t);
    // No KISTE_URL: the launcher points the CLI at the service it came from.
    const me = await run(kiste, ['whoami'], { ...cleanEnv(), KISTE_TOKEN: await apiKeyFor(t, account), KISTE_CONFIG_DIR: join(dir, 'config') });
    expect(me).toMatchObject({ code: 0, stdout: `${account.email}\n` });
  });

  test('the bundle and the PowerShell installer are served for this service', async () => {
    const bundle = await t.api.get('/downloads/kiste.js').expect(200);
    expect(bundle.headers['content-type']).toMatch(/^application\/javascript/);
    expect(bundle.text.startsWith('#!/usr/bin/env node\n')).toBe(true);
    const ps1 = await t.api.get('/install.ps1').expect(200);
    expect(ps1.text).toContain(`$Base = '${url}'`);
    expect(ps1.text).toContain('/downloads/kiste.js');
    expect(ps1.text).toContain('KISTE_DEFAULT_URL');
  });
});
