// Keeps the machines' egress rules in place, and every machine cut off while they are not.
//
// The rules live in the host's nftables, which other tools write too: `systemctl restart nftables`
// (Debian's nftables.conf begins with `flush ruleset`), firewalld, an operator's `nft flush`.
// Without kiste's table every guest reaches the host's loopback (kiste's API, PostgreSQL), private
// ranges and 169.254.169.254. So the watch:
// - knows what "in place" means: the table's stateless listing (HostFirewall.listing: rules, sets
//   and their elements, hooks, table flags) equals the one read right after kiste loaded it; a
//   missing table, a removed rule, a changed set element or a dormant table all differ;
// - looks at once when `nft monitor` reports a change (it freezes the machines first when the
//   change names kiste's table), every CHECK_INTERVAL_MS besides (a change the monitor missed,
//   a monitor that died) and before every machine start (verified());
// - when the rules are not in place, freezes every process of a jail user (jail-freezer.ts: every
//   machine's QEMU), loads the rules again, reads them back and thaws what it froze. While loading
//   fails the machines stay frozen, starts are refused (problem(): K09 with the reason), and every
//   check tries again and freezes whatever started meanwhile.
// Why freezing processes rather than pausing guests over QMP (`stop`): the kernel holds a stopped
// process whatever it runs, so a taken-over QEMU (which the rules are there to contain as well) is
// held too, and so is slirp, which QEMU's main loop keeps driving while only the vCPUs are paused;
// no monitor has to answer; and the lifecycle's own QMP stop/cont (saves, forks, starts) cannot
// resume a guest behind the watch's back. What remains open: the time between the change and the
// monitor's event reaching the service (milliseconds), in which a guest's packets pass; and SYNs of
// attempts the rules were dropping, which the kernel (not the frozen QEMU) retransmits: while the
// table is missing such a handshake can complete, with no data after it (QEMU runs again only once
// the rules, which drop everything that follows, are back).
// The monitor is a child (`nft monitor`) that dies with the service (setpriv --pdeathsig), also on
// a kill -9; it and the timers never keep the process alive on their own.
import { spawn, type ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';
import type { HostFirewall } from './host-firewall';
import type { JailFreezer } from './jail-freezer';

export const CHECK_INTERVAL_MS = 2000;
/** A monitor that exits is started again after this, doubled while it keeps exiting soon (up to a minute). */
const MONITOR_RESTART_MS = 1000;
const MONITOR_RESTART_MAX_MS = 60_000;
/** This many repairs within a minute means something keeps changing the table: said once a minute. */
const REPAIRS_TO_REPORT = 5;

export interface EgressProblem {
  reason: string;
  hint: string;
}

export interface EgressWatchLogger {
  info(object: object, message: string): void;
  warn(object: object, message: string): void;
  error(object: object, message: string): void;
}

export class EgressWatch {
  /** The listing read right after kiste's last load; undefined until the first load succeeded. */
  private expected: string | undefined;
  /** Set while the rules are not known to be in place: since when, and why. */
  private broken: { since: number; reason: string; lastError?: string } | undefined;
  /** The machines are frozen by this watch (after a monitor event, or while the rules are broken). */
  private holding = false;
  private running = false;
  private timer: NodeJS.Timeout | undefined;
  private monitor: ChildProcess | undefined;
  private monitorRestartMs = MONITOR_RESTART_MS;
  /** When the table was found missing or altered, within the last minute. */
  private recentRepairs: number[] = [];
  private reportedRepairsAt = 0;
  private current: Promise<void> | undefined;
  private next: Promise<void> | undefined;
  /**
   * Counts the monitor's reports of a change to the table. A check that began before such a report
   * read the table as it was before the change: it must not thaw what the report froze (the check
   * the report queued decides).
   */
  private changesSeen = 0;
  private readonly tableMention: RegExp;

  constructor(
    private readonly firewall: HostFirewall,
    private readonly freezer: JailFreezer,
    private readonly logger: EgressWatchLogger,
  ) {
    this.tableMention = new RegExp(`\\binet ${firewall.table}\\b`);
  }

  /** Loads the rules and watches them from now on; resolves after the first load (failed or not). */
  async start(): Promise<void> {
    if (this.running) return this.check();
    this.running = true;
    await this.check();
    this.watchMonitor();
    this.timer = setInterval(() => void this.check(), CHECK_INTERVAL_MS);
    this.timer.unref();
  }

  /** Stops watching (the rules and the machines stay as they are); resolves once no check runs. */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    clearInterval(this.timer);
    this.monitor?.kill('SIGKILL');
    this.monitor = undefined;
    await this.current;
    if (this.holding) this.logger.error({ frozen: this.freezer.frozen().length }, "stopped watching while the machines' network rules were not in place: their QEMUs stay frozen until the service starts again");
  }

  /** Why machines may not start now (the rules are not in place), or null. */
  problem(): EgressProblem | null {
    if (!this.broken) return null;
    return {
      reason: `the machines' network rules are not in place (${this.broken.lastError ?? this.broken.reason}); running machines are frozen until they are`,
      hint: "kiste puts them back by itself. If this stays, check that `nft list ruleset` works (kiste needs nftables and CAP_NET_ADMIN: run it as root on the host, not in an unprivileged container) and that no tool keeps removing kiste's table.",
    };
  }

  /**
   * problem(), once the check a change to the table started is done: between the freeze a monitor
   * event makes and that check's outcome, problem() would still say null, and a start asked then
   * would go ahead and fail later (K08) instead of being refused (K09).
   */
  async settledProblem(): Promise<EgressProblem | null> {
    if (this.holding) await (this.next ?? this.current);
    return this.problem();
  }

  /** Checks now; rejects unless the rules are in place after that check (and while nothing watches them). */
  async verified(): Promise<void> {
    if (!this.running) throw new Error("the machines' network rules are not being watched (the service is stopping)");
    await this.check();
    const problem = this.problem();
    if (problem) throw new Error(`${problem.reason}. ${problem.hint}`);
  }

  /** One check that begins after this call (checks never overlap; callers during one share the next). */
  check(): Promise<void> {
    if (!this.current) {
      this.current = this.checkOnce().catch((error: Error) => this.logger.error({ err: error }, "the machines' network rules could not be checked")).finally(() => {
        this.current = undefined;
      });
      return this.current;
    }
    this.next ??= this.current.then(() => {
      this.next = undefined;
      return this.check();
    });
    return this.next;
  }

  private async checkOnce(): Promise<void> {
    if (!this.running) return;
    const changesSeen = this.changesSeen;
    if (this.expected === undefined) return this.restore('not loaded yet', changesSeen);
    let found: string | null;
    try {
      found = await this.firewall.listing();
    } catch (error) {
      return this.restore(`nft could not list it: ${(error as Error).message}`, changesSeen);
    }
    if (found === this.expected) return this.release(changesSeen);
    return this.restore(found === null ? 'the table is missing' : 'the table was altered', changesSeen);
  }

  /** Loads the rules again: frozen machines wait for it; a failure freezes them (again: new ones). */
  private async restore(reason: string, changesSeen: number): Promise<void> {
    const first = this.expected === undefined;
    if (!first) {
      this.hold();
      if (!this.broken) {
        this.broken = { since: Date.now(), reason };
        this.logger.warn({ table: this.firewall.table, reason }, "the machines' network rules are not in place: machines frozen while they are put back");
        this.countRepair();
      }
    }
    try {
      await this.firewall.load();
      const listing = await this.firewall.listing();
      if (listing === null) throw new Error('the table is missing right after loading it');
      this.expected = listing;
    } catch (error) {
      const message = (error as Error).message;
      this.hold();
      this.broken ??= { since: Date.now(), reason };
      if (this.broken.lastError !== message) this.logger.error({ table: this.firewall.table, err: error }, "the machines' network rules could not be put back: machines stay frozen, starts are refused, retrying");
      this.broken.lastError = message;
      return;
    }
    if (first && !this.holding) {
      // A service that died while its watch held machines left them frozen: they run again now.
      const thawed = this.freezer.thaw();
      if (thawed > 0) this.logger.info({ table: this.firewall.table, thawed }, 'machines an earlier run of the service froze run on');
    }
    this.release(changesSeen);
  }

  /** A table that keeps changing (another kiste on the same uid base, a tool re-applying its ruleset) is named in the log. */
  private countRepair(): void {
    const now = Date.now();
    this.recentRepairs = [...this.recentRepairs.filter((at) => now - at < 60_000), now];
    if (this.recentRepairs.length < REPAIRS_TO_REPORT || now - this.reportedRepairsAt < 60_000) return;
    this.reportedRepairsAt = now;
    this.logger.error({ table: this.firewall.table, repairs: this.recentRepairs.length }, "kiste's nftables table keeps being changed: is another kiste running with the same KISTE_MACHINE_UID_BASE, or a tool re-applying its ruleset? Machines are frozen each time");
  }

  /**
   * The rules are in place: whatever this watch froze runs on — unless the monitor reported a change
   * since the check began (`changesSeen` then differs), which the check it queued looks at.
   */
  private release(changesSeen: number): void {
    if (changesSeen !== this.changesSeen) return;
    const broken = this.broken;
    this.broken = undefined;
    if (!this.holding) return;
    this.holding = false;
    const thawed = this.freezer.thaw();
    if (broken) this.logger.info({ table: this.firewall.table, thawed, frozenMs: Date.now() - broken.since }, "the machines' network rules are back in place: machines run on");
  }

  private hold(): void {
    this.holding = true;
    this.freezer.freeze();
  }

  /** `nft monitor`: any change makes a check; one that names kiste's table freezes the machines first. */
  private watchMonitor(): void {
    if (!this.running) return;
    const child = spawn('setpriv', ['--pdeathsig', 'KILL', '--', 'nft', 'monitor'], { stdio: ['ignore', 'pipe', 'ignore'] });
    this.monitor = child;
    let partial = '';
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (chunk: string) => {
      // Only the table's name is looked for (near a line's start): the start of a line a chunk cut
      // is kept to be read with its rest, so a name cut in two is still found.
      const text = partial + chunk;
      partial = text.slice(text.lastIndexOf('\n') + 1).slice(0, 512);
      if (this.tableMention.test(text)) {
        this.changesSeen += 1;
        this.hold();
      }
      void this.check();
    });
    child.on('error', () => undefined); // reported as its close
    const startedAt = Date.now();
    child.on('close', () => {
      if (this.monitor !== child || !this.running) return;
      this.monitorRestartMs = Date.now() - startedAt > MONITOR_RESTART_MAX_MS ? MONITOR_RESTART_MS : Math.min(this.monitorRestartMs * 2, MONITOR_RESTART_MAX_MS);
      this.logger.warn({ restartInMs: this.monitorRestartMs }, "nft monitor exited; the machines' network rules are checked every 2 s until it is back");
      setTimeout(() => this.watchMonitor(), this.monitorRestartMs).unref();
    });
    child.unref();
    (child.stdout as Socket).unref();
  }
}
