// The machines' egress rules stay in place, and machines stay cut off while they are not: on the
// host's real nftables (a table of this test's own, never another one, never the whole ruleset)
// with real processes running as jail users (setpriv), as machines' QEMUs do.
// - the content comparison: counters do not count, a removed rule, a changed set element or a
//   dormant table do;
// - the watch: a deleted or altered table is put back within seconds, the jail processes are frozen
//   meanwhile (and stay frozen, with starts refused, while nft cannot load the rules), then thawed;
//   processes of other users are never touched; a check that read the table before a change the
//   monitor reported thaws nothing; a table that keeps being changed is named in the log;
// - a watch that starts thaws what an earlier run froze; stopping it, or SIGKILL to its process,
//   leaves no `nft monitor` behind.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { EgressWatch } from '../../src/compute/jail/egress-watch';
import { HostFirewall } from '../../src/compute/jail/host-firewall';
import { JailFreezer } from '../../src/compute/jail/jail-freezer';
import { pollUntil } from '../../src/compute/qemu/wait';
import { childrenNamed, processLive } from '../support/child-processes';
import { testUidBase } from '../support/jail';

jest.setTimeout(60_000);

const uidBase = testUidBase();
const uids = { first: uidBase + 1, last: uidBase + 65_535 };
const table = `kiste_${uidBase}`;
const nft = (...args: string[]) => execFileSync('nft', args, { encoding: 'utf8' });
const children: ChildProcess[] = [];

/** A process running as `uid` (a jail user, or not), as setpriv starts a machine's QEMU. */
function processAs(uid: number): number {
  const child = spawn('setpriv', [`--reuid=${uid}`, `--regid=${uidBase}`, '--clear-groups', '--', 'sleep', '600'], { stdio: 'ignore' });
  children.push(child);
  return child.pid!;
}

/** `T` while stopped, `S` while it sleeps (runs). */
function stateOf(pid: number): string {
  return /^State:\s+(\S)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]!;
}

const firewall = new HostFirewall({ table, uids, mode: 'public', allow: [], resolvers: ['10.255.255.53'] });

afterAll(async () => {
  for (const child of children) child.kill('SIGKILL');
  await firewall.unload();
});

describe('the listing the watch compares', () => {
  it('ignores counters and sees a removed rule, a changed set element and a dormant table', async () => {
    await firewall.load();
    const loaded = await firewall.listing();
    expect(loaded).toContain(`table inet ${table}`);
    expect(loaded).toContain('127.0.0.0/8');
    // traffic of a jail user bumps the drop counters: not a change
    try {
      execFileSync('setpriv', [`--reuid=${uids.first}`, `--regid=${uidBase}`, '--clear-groups', '--', 'bash', '-c', 'timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/9"'], { stdio: 'ignore' });
    } catch {
      // dropped: it times out
    }
    expect(nft('list', 'chain', 'inet', table, 'machines')).toMatch(/counter packets [1-9]/);
    expect(await firewall.listing()).toBe(loaded);

    const handle = /fib daddr type .* # handle (\d+)/.exec(nft('-a', 'list', 'chain', 'inet', table, 'machines'))![1]!;
    nft('delete', 'rule', 'inet', table, 'machines', 'handle', handle);
    expect(await firewall.listing()).not.toBe(loaded);

    await firewall.load();
    expect(await firewall.listing()).toBe(loaded);
    nft('delete', 'element', 'inet', table, 'special4', '{ 127.0.0.0/8 }');
    expect(await firewall.listing()).not.toBe(loaded);

    await firewall.load();
    nft('add', 'element', 'inet', table, 'allowed4', '{ 127.0.0.1 }');
    expect(await firewall.listing()).not.toBe(loaded);

    await firewall.load();
    nft('add', 'table', 'inet', table, '{ flags dormant; }');
    expect(await firewall.listing()).not.toBe(loaded);

    await firewall.unload();
    expect(await firewall.listing()).toBeNull();
  });
});

describe('the egress watch', () => {
  const logs: string[] = [];
  const logger = { info: (_: object, m: string) => logs.push(`info ${m}`), warn: (_: object, m: string) => logs.push(`warn ${m}`), error: (_: object, m: string) => logs.push(`error ${m}`) };
  let watch: EgressWatch;
  let jailed: number;
  let outsider: number;

  beforeAll(async () => {
    jailed = processAs(uids.first + 41);
    outsider = processAs(4242); // not a jail user
    // one an earlier run of the service froze
    process.kill(jailed, 'SIGSTOP');
    expect(await pollUntil(() => (stateOf(jailed) === 'T' ? true : undefined), 2000)).toBe(true);
    watch = new EgressWatch(firewall, new JailFreezer(uids), logger);
    await watch.start();
  });

  afterAll(() => watch.stop());

  it('loads the rules at start and thaws what an earlier run froze', async () => {
    expect(await firewall.listing()).toContain(`table inet ${table}`);
    expect(stateOf(jailed)).not.toBe('T');
    expect(watch.problem()).toBeNull();
    expect(logs).toContain('info machines an earlier run of the service froze run on');
  });

  it('puts a deleted table back within seconds, the jail processes frozen meanwhile', async () => {
    const expected = await firewall.listing();
    const frozen: number[] = [];
    const realFreeze = JailFreezer.prototype.freeze;
    const freeze = jest.spyOn(JailFreezer.prototype, 'freeze').mockImplementation(function (this: JailFreezer) {
      frozen.push(Date.now());
      return realFreeze.call(this);
    });
    const started = Date.now();
    nft('delete', 'table', 'inet', table);
    try {
      expect(await pollUntil(async () => ((await firewall.listing()) === expected ? true : undefined), 5000, 50)).toBe(true);
      expect(frozen.length).toBeGreaterThan(0);
      console.log(`table deleted → jail processes frozen after ${frozen[0]! - started} ms`);
    } finally {
      freeze.mockRestore();
    }
    expect(await pollUntil(() => (stateOf(jailed) !== 'T' ? true : undefined), 3000)).toBe(true);
    expect(watch.problem()).toBeNull();
  });

  it('puts an altered table back (an element that lets jail users reach the loopback)', async () => {
    const expected = await firewall.listing();
    nft('add', 'element', 'inet', table, 'allowed4', '{ 127.0.0.0/8 }');
    expect(await pollUntil(async () => ((await firewall.listing()) === expected ? true : undefined), 5000, 50)).toBe(true);
    expect(await pollUntil(() => (stateOf(jailed) !== 'T' ? true : undefined), 3000)).toBe(true);
  });

  it('thaws nothing on a check that read the table before the change the monitor reported', async () => {
    const expected = await firewall.listing();
    const tableMissing = () => {
      try {
        nft('list', 'table', 'inet', table);
        return false;
      } catch {
        return true;
      }
    };
    const realListing = firewall.listing.bind(firewall);
    let stale = true;
    let staleReturned = false;
    // The next check's read happens just before the table is deleted; it ends once the monitor's
    // report has frozen the machines, with what it read before.
    const listing = jest.spyOn(firewall, 'listing').mockImplementation(async () => {
      if (!stale) return realListing();
      stale = false;
      const before = await realListing();
      nft('delete', 'table', 'inet', table);
      await pollUntil(() => (stateOf(jailed) === 'T' ? true : undefined), 5000);
      staleReturned = true;
      return before;
    });
    const realThaw = JailFreezer.prototype.thaw;
    const thawedWhileMissing: boolean[] = [];
    const thaw = jest.spyOn(JailFreezer.prototype, 'thaw').mockImplementation(function (this: JailFreezer) {
      thawedWhileMissing.push(tableMissing());
      return realThaw.call(this);
    });
    try {
      expect(await pollUntil(() => (staleReturned ? true : undefined), 8000)).toBe(true);
      expect(await pollUntil(async () => ((await realListing()) === expected && stateOf(jailed) !== 'T' ? true : undefined), 8000, 50)).toBe(true);
      expect(thawedWhileMissing.length).toBeGreaterThan(0);
      expect(thawedWhileMissing).not.toContain(true);
    } finally {
      listing.mockRestore();
      thaw.mockRestore();
    }
    expect(watch.problem()).toBeNull();
  });

  it('keeps jail processes frozen and starts refused while the rules cannot be loaded, and thaws them once they can', async () => {
    const load = jest.spyOn(firewall, 'load').mockRejectedValue(new Error('nft: Operation not permitted'));
    try {
      nft('delete', 'table', 'inet', table);
      expect(await pollUntil(() => (stateOf(jailed) === 'T' ? true : undefined), 5000)).toBe(true);
      expect(stateOf(outsider)).not.toBe('T'); // only the jail users
      // A start asked the moment the machines are frozen waits for the check the change started,
      // and is refused (problem() alone would still say null until that check is done).
      expect(await watch.settledProblem()).toMatchObject({ reason: expect.stringContaining('not in place') });
      // (frozen on the monitor's line already; the check that finds the table missing follows)
      expect(await pollUntil(() => watch.problem() ?? undefined, 5000)).toMatchObject({ reason: expect.stringContaining('not in place') });
      await expect(watch.verified()).rejects.toThrow(/Operation not permitted/);
      // a machine process started meanwhile is frozen by the next check
      const late = processAs(uids.first + 42);
      expect(await pollUntil(() => (stateOf(late) === 'T' ? true : undefined), 5000)).toBe(true);
      expect(logs.filter((line) => line.startsWith('error ')).length).toBe(1); // one error, not one per retry
    } finally {
      load.mockRestore();
    }
    expect(await pollUntil(() => (stateOf(jailed) !== 'T' ? true : undefined), 5000)).toBe(true);
    expect(await firewall.listing()).toContain(`table inet ${table}`);
    expect(watch.problem()).toBeNull();
    await expect(watch.verified()).resolves.toBeUndefined();
    expect(logs).toContain("info the machines' network rules are back in place: machines run on");
  });

  it('names a table that keeps being changed in the log, once', async () => {
    const expected = await firewall.listing();
    for (let i = 0; i < 6; i++) {
      nft('delete', 'table', 'inet', table);
      expect(await pollUntil(async () => ((await firewall.listing()) === expected ? true : undefined), 5000, 20)).toBe(true);
      await pollUntil(() => watch.problem() === null ? true : undefined, 2000);
    }
    expect(logs.filter((line) => line.includes('keeps being changed'))).toHaveLength(1);
  });

  it('leaves no nft monitor behind when stopped', async () => {
    expect(childrenNamed(process.pid, 'nft').length).toBeGreaterThanOrEqual(1); // the monitor (and maybe a listing)
    await watch.stop();
    expect(await pollUntil(() => (childrenNamed(process.pid, 'nft').length === 0 ? true : undefined), 3000)).toBe(true);
    await expect(watch.verified()).rejects.toThrow(/not being watched/); // a start now is refused
    // and no longer puts the table back
    nft('delete', 'table', 'inet', table);
    await new Promise((resolve) => setTimeout(resolve, 2500));
    expect(await firewall.listing()).toBeNull();
  });
});

describe('a watching process killed with SIGKILL', () => {
  it('leaves no nft monitor behind', async () => {
    const ownBase = testUidBase();
    const child = spawn(process.execPath, ['--import', 'tsx', join(__dirname, '../fixtures/egress-watch-process.ts'), String(ownBase)], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(child);
    try {
      await new Promise<void>((resolve) => child.stdout!.on('data', (chunk) => String(chunk).includes('watching') && resolve()));
      const monitor = await pollUntil(() => childrenNamed(child.pid!, 'nft')[0], 5000);
      expect(monitor).toBeDefined();
      child.kill('SIGKILL');
      expect(await pollUntil(() => (processLive(monitor!) ? undefined : true), 3000)).toBe(true);
    } finally {
      nft('delete', 'table', 'inet', `kiste_${ownBase}`);
    }
  });
});
