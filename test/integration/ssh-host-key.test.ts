// GET /v1/instances/{name}/ssh-host-key: the pinned key (Ed25519 first), alias <name>.kiste, a
// known_hosts line OpenSSH accepts with the fingerprint ssh-keygen prints; K04 before the first
// start recorded keys; other accounts see nothing. Rows without a VM (the lifecycle tests boot one).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateHostKeys } from '../../src/compute/ssh-host-keys';
import { apiKeyFor, bearer, createAccount, startTestService, TestService } from '../support/harness';
import { insertInstance } from '../support/instance-rows';

describe('ssh host key', () => {
  let t: TestService;
  const dir = mkdtempSync(join(tmpdir(), 'kiste-known-hosts-'));
  beforeAll(async () => {
    t = await startTestService();
  });
  afterAll(async () => {
    rmSync(dir, { recursive: true, force: true });
    await t.close();
  });

  test('answers the Ed25519 key with its alias, fingerprint and a known_hosts line OpenSSH reads', async () => {
    const account = await createAccount(t);
    const key = await apiKeyFor(t, account);
    const [ed25519, ecdsa] = generateHostKeys();
    // Recorded in the guest's order (ecdsa first): the answer still pins Ed25519.
    const sshHostKeys = [ecdsa!, ed25519!].map((k) => ({ algorithm: k.algorithm, public_key: k.publicKey }));
    await insertInstance(t, account, 'web-one', 'stopped', { sshHostKeys });

    const res = await t.api.get('/v1/instances/web-one/ssh-host-key').set(bearer(key)).expect(200);
    expect(res.body).toEqual({
      object: 'ssh_host_key', instance: 'web-one', alias: 'web-one.kiste', algorithm: 'ssh-ed25519',
      public_key: ed25519!.publicKey, fingerprint_sha256: expect.stringMatching(/^SHA256:[A-Za-z0-9+/]{43}$/),
      known_hosts_line: `web-one.kiste ${ed25519!.publicKey}`,
    });
    const knownHosts = join(dir, 'known_hosts');
    writeFileSync(knownHosts, `${res.body.known_hosts_line}\n`);
    const found = execFileSync('ssh-keygen', ['-F', 'web-one.kiste', '-f', knownHosts, '-l'], { encoding: 'utf8' });
    expect(found).toContain(res.body.fingerprint_sha256);
    expect(found).toContain('ED25519');
  });

  test('409 K04 before the machine has keys; 404 K01 for a name of another account', async () => {
    const account = await createAccount(t);
    const key = await apiKeyFor(t, account);
    await insertInstance(t, account, 'fresh', 'starting');
    const early = await t.api.get('/v1/instances/fresh/ssh-host-key').set(bearer(key)).expect(409);
    expect(early.body.error).toMatchObject({ code: 'K04', type: 'ssh_not_ready', retryable: true });

    const other = await createAccount(t);
    await insertInstance(t, other, 'theirs', 'running', { sshHostKeys: [{ algorithm: 'ssh-ed25519', public_key: generateHostKeys()[0]!.publicKey }] });
    const hidden = await t.api.get('/v1/instances/theirs/ssh-host-key').set(bearer(key)).expect(404);
    expect(hidden.body.error).toMatchObject({ code: 'K01' });
  });
});
