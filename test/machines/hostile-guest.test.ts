// A hostile guest against the service, on real machines (issue 21). Root in one account's machine
// stops kiste-agent and speaks on the agent's virtio port itself (a perl script: perl-base is in
// every Debian, and starts in a moment where Node takes 10-20 s under TCG). It announces itself,
// answers the host's SYNC with its nonce and hello like an agent, then writes crafted frames: null
// RESPONSE and EVENT, an exit event for a channel that does not exist, WINDOW of 4 GiB, 1 MiB of
// DATA for nobody and a flood of garbage; afterwards it answers every request with what does not
// fit (metrics out of range, an exit status that is no status, credit past the window, error text
// with escape sequences; GET metrics answers 503 K10). Meanwhile another account's machine runs commands. The service stays
// up, the other machine answers throughout (and its account's API after), every call to the
// hostile machine fails cleanly, and once the real agent is back the hostile machine's link works
// again.
import type { AgentClient } from '../../src/compute/agent-client';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { apiKeyFor, bearer, createAccount, startTestService, TestService } from '../support/harness';

jest.setTimeout(900_000);

const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste';
const SHAPE = { profile: 'desktop', vcpu: 1, memory_mib: 512, disk_mib: 2048, ssh_public_key: SSH_KEY };

/** The hostile peer, run in the guest as its own systemd unit (stopping kiste-agent does not stop it). */
const HOSTILE_PL = String.raw`
use strict;
use warnings;
my $PORT = '/dev/virtio-ports/org.kiste.agent';
my $MAGIC = pack('H*', 'f09f93a6f09f93a6');
my $END = time + 300;
select(undef, undef, undef, 1.0); # let the command that started us finish
system('systemctl', 'stop', 'kiste-agent');
open(my $fh, '+<', $PORT) or die "cannot open the port: $!";
binmode($fh);

sub frame { my ($kind, $channel, $payload) = @_; return pack('NCN', 5 + length($payload), $kind, $channel) . $payload; }
sub marker { my ($phase, $nonce) = @_; my $one = ("\0" x 16) . frame(7, 0xffffffff, $MAGIC . chr($phase) . $nonce); return $one . $one; }
sub out {
  my ($bytes) = @_;
  while (length($bytes) && time < $END) {
    my $n = syswrite($fh, $bytes);
    if (!$n) { select(undef, undef, undef, 0.05); next; }
    substr($bytes, 0, $n, '');
  }
}
sub respond { my ($id, $body) = @_; out(frame(2, 0, '{"id":' . $id . ',' . $body . '}')); }

my $hellos = 0;
my $in = '';
out(marker(2, "\x01" x 8)); # ANNOUNCE, as an agent that (re)opened the port does
MAIN: while (time < $END) {
  my $n = sysread($fh, my $chunk, 65536);
  if (!$n) { select(undef, undef, undef, 0.05); next; } # EOF while no host is connected
  $in .= $chunk;
  while (length($in) >= 9) {
    my ($len, $kind, $channel) = unpack('NCN', $in);
    if ($len < 5 || $len > 4194309 || $kind < 1 || $kind > 7) { substr($in, 0, 1, ''); next; }
    last if length($in) < 4 + $len;
    my $payload = substr($in, 9, $len - 5);
    substr($in, 0, 4 + $len, '');
    if ($kind == 7 && length($payload) == 17 && ord(substr($payload, 8, 1)) == 0) { out(marker(1, substr($payload, 9, 8))); next; }
    next unless $kind == 1;
    my ($id, $method) = $payload =~ /^\{"id":(\d+),"method":"([^"]+)"/ or next;
    if ($method eq 'hello') {
      $hellos++;
      respond($id, '"result":{"protocol_version":1,"agent_version":"hostile","boot_id":null,"uptime_seconds":1,"methods":["hello"],"max_payload":4194304}');
      next unless $hellos == 1;
      my $burst = frame(2, 0, 'null') . frame(3, 0, 'null') . frame(2, 0, '[]') . frame(2, 0, '{"id":1e999}')
        . frame(3, 0, '{"event":null}') . frame(3, 77, '{"event":"exec.exit","data":null}') . frame(5, 77, pack('N', 0xffffffff));
      $burst .= frame(5, 1000 + $_, pack('N', 0xffffffff)) for 1 .. 20000;
      $burst .= frame(4, 12345, "\0" x 65536) for 1 .. 16;
      $burst .= frame(2, 0, 'null') for 1 .. 50;
      out($burst);
    } elsif ($method eq 'metrics') {
      respond($id, '"result":{"cpu":null,"memory":"lots","disk":{"total_mib":1e999,"used_mib":-1,"available_mib":0},"uptime_seconds":-5,"processes":"none"}');
    } elsif ($method eq 'tcp.open') {
      respond($id, '"result":{"channel":77,"window_bytes":16777216}');
      out(frame(5, 77, pack('N', 0xffffffff)));
    } elsif ($method eq 'exec.start') {
      respond($id, '"result":{"channel":78,"pid":4242,"window_bytes":0}');
      out(frame(3, 78, '{"event":"exec.exit","data":{"channel":78,"status":"pwned\u001b[31m","exit_code":1e999,"signal":"x","duration_ms":-1,"stdout_bytes":0,"stderr_bytes":0}}'));
      out(frame(6, 78, ''));
    } elsif ($method eq 'shutdown') {
      respond($id, '"result":{"accepted":true}');
      last MAIN;
    } else {
      respond($id, '"error":{"code":"internal","message":"\u001b]0;pwned\u0007\u202e' . ('x' x 5000) . '"}');
    }
  }
}
close($fh);
system('systemctl', 'start', 'kiste-agent');
`;

async function waitFor<T>(what: string, ms: number, probe: () => T | null | undefined | false): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('a hostile guest', () => {
  let t: TestService;
  let hostileKey: string;
  let otherKey: string;
  let hostileId: string;
  let otherId: string;

  beforeAll(async () => {
    await ensureTestImage();
    t = await startTestService({ env: { KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_IMAGE_PROFILE: 'minimal' } });
    expect(await t.services.machineHost.refreshImage('minimal')).not.toBeNull();
    [hostileKey, otherKey] = await Promise.all([apiKeyFor(t, await createAccount(t)), apiKeyFor(t, await createAccount(t))]);
    const created = (res: { status: number; body: unknown }) => {
      if (res.status !== 200) throw new Error(`create answered ${res.status}: ${JSON.stringify(res.body)}`);
    };
    // One after the other: two TCG guests booting at once on a shared 2-core host can miss the boot timeout.
    const hostile = await t.api.post('/v1/instances').set(bearer(hostileKey)).send({ ...SHAPE, name: 'hostile' }).expect(created);
    const other = await t.api.post('/v1/instances').set(bearer(otherKey)).send({ ...SHAPE, name: 'bystander' }).expect(created);
    hostileId = hostile.body.id;
    otherId = other.body.id;
  });

  afterAll(async () => {
    if (!t) return;
    for (const id of await t.services.machineHost.knownMachineIds()) await t.services.machineHost.destroy(id);
    await t.close();
  });

  /**
   * A shell command in a guest through its agent. The deadline is generous: this host is shared, and
   * a TCG guest on a loaded host can take more than the service's default 10 s to start a command.
   */
  async function sh(id: string, script: string): Promise<string> {
    const result = await t.services.machineHost.agent(id).run({ argv: ['sh', '-c', script] }, { timeoutMs: 120_000 });
    if (result.exit_code !== 0) throw new Error(`${script}: exit ${result.exit_code}: ${result.stderr.toString()}`);
    return result.stdout.toString().trim();
  }

  /** A command on the other account's machine: it must complete, and its time is recorded. */
  async function bystanderRuns(): Promise<number> {
    const started = Date.now();
    expect(await sh(otherId, 'echo alive')).toBe('alive');
    return Date.now() - started;
  }

  it('cannot crash or starve the service, nor reach another machine; its link recovers once the agent is back', async () => {
    const agent = t.services.machineHost.agent(hostileId) as AgentClient;
    const hellos: string[] = [];
    agent.on('connected', (hello) => hellos.push(hello.agent_version));

    const script = Buffer.from(HOSTILE_PL).toString('base64');
    expect(await sh(hostileId, `echo ${script} | base64 -d > /root/hostile.pl && systemd-run --quiet --unit=kiste-hostile perl /root/hostile.pl && echo started`)).toBe('started');

    // The other machine keeps answering while the hostile one does its worst.
    const latencies: number[] = [];
    let watching = true;
    const watcher = (async () => {
      while (watching) latencies.push(await bystanderRuns());
    })();

    // The hostile peer takes the link, floods garbage, loses the link for it, and takes it again.
    await waitFor('the hostile peer to take the link twice', 120_000, () => hellos.filter((v) => v === 'hostile').length >= 2 && agent.connected);
    expect(agent.hello?.agent_version).toBe('hostile');
    // Operators see it: the scrape counts the dropped link.
    expect((await t.services.metrics.text()).body).toMatch(/^kiste_guest_links_dropped_total\{peer="agent"\} [1-9]\d*$/m);

    // Every call to it fails cleanly: answers that do not fit, credit past the window, a bad exit.
    await expect(agent.metrics(10, { timeoutMs: 30_000 })).rejects.toMatchObject({ code: 'bad_response' });
    // Through the API: the machine's agent is unavailable (503 K10, retry later), not a service fault.
    const sample = await t.api.get('/v1/instances/hostile/metrics').set(bearer(hostileKey)).expect(503);
    expect(sample.body.error).toMatchObject({ code: 'K10', type: 'machine_agent_unavailable', retryable: true });
    expect(sample.headers['retry-after']).toBe('10');
    // The WINDOW may come in the same read as the answer (the open fails) or just after (the stream does).
    const tunnel = agent.openTcp(22, undefined, { timeoutMs: 30_000 }).then((stream) => new Promise((_, reject) => stream.once('error', reject)));
    await expect(tunnel).rejects.toMatchObject({ code: 'protocol' });
    const exec = await t.api.post('/v1/instances/hostile/exec').set(bearer(hostileKey)).send({ argv: ['true'] }).expect(200);
    const last = JSON.parse(exec.text.trim().split('\n').at(-1)!);
    expect(last).toMatchObject({ type: 'failed' });
    expect(last.message).toContain('exec channel 78');
    const refused = await agent.setTime(Date.now(), { timeoutMs: 30_000 }).catch((error: Error) => error);
    expect(refused).toMatchObject({ code: 'internal' });
    expect((refused as Error).message.length).toBeLessThan(2100);
    expect((refused as Error).message).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u202e]/);

    // The guest gives the port back to the real agent: the link is the agent's again.
    await agent.shutdown(false, { timeoutMs: 30_000 });
    await waitFor('the real agent to take the link back', 120_000, () => agent.connected && agent.hello?.agent_version !== 'hostile');
    expect(await sh(hostileId, 'echo back')).toBe('back');

    watching = false;
    await watcher;
    console.log(`bystander: ${latencies.length} commands while the hostile guest ran, slowest ${Math.max(...latencies)} ms`);
    expect(latencies.length).toBeGreaterThan(2);
    expect(Math.max(...latencies)).toBeLessThan(60_000);
    // The other account's API works as before: its command runs to completion.
    const res = await t.api.post('/v1/instances/bystander/exec').set(bearer(otherKey)).send({ argv: ['sh', '-c', 'echo still'] }).expect(200);
    expect(JSON.parse(res.text.trim().split('\n').at(-1)!)).toMatchObject({ type: 'completed', exit_code: 0 });
    const status = await t.api.get('/v1/instances/hostile').set(bearer(hostileKey)).expect(200);
    expect(status.body.status).toBe('running');
  });
});
