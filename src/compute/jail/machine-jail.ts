// The jail every machine's QEMU runs in, so that a guest (or a QEMU it has taken over) reaches
// nothing of the host:
// - a user of its own: uid `uidBase + n` (n from 1 to 65535, chosen at random among the free ones and
//   kept in the machine's folder), group `uidBase`; no passwd entry is needed. QEMU never runs as
//   root: setpriv drops to that user (no supplementary groups, no capabilities, no_new_privs)
//   before QEMU starts, and QEMU's seccomp sandbox keeps it from exec'ing or changing users;
// - its files only: the machine's folder is root's, passable by its user alone; inside, `run/`
//   holds what QEMU makes (sockets, pid file, serial log, RAM file) and is the user's only while
//   QEMU starts: before the guest runs a single instruction the folder goes back to root, so the
//   service can trust the paths it connects to there. Disk layers are the user's own (mode 0600);
//   layers shared with the machine it was forked from are readable through an ACL entry; images
//   are public (world-readable); every folder on the way is passable, never listable;
// - its network: the egress rules (egress-rules.ts) for the whole uid range, kept in place by
//   egress-watch.ts, which freezes every jail process while they are not;
// - its share of the host: cgroup limits (cgroups.ts).
// The service checks all of this at start (problem()) and refuses to start machines without it.
import { execFileSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { StartOptions } from '../qemu/qemu-process';
import { shellQuote } from '../../shell-quote';
import { detectCgroups, MachineLimits, type MachineShapeLimits } from './cgroups';
import { egressTable, resolversOf, type EgressMode } from './egress-rules';
import { grant, readableBy, revoke, setAcl } from './file-access';
import { openJailFolders } from './jail-folders';
import { machineFiles, RUN_ENTRIES } from '../qemu/machine-files';
import { HostFirewall } from './host-firewall';
import { EgressWatch, type EgressWatchLogger } from './egress-watch';
import { JailFreezer } from './jail-freezer';
import { inMountJail, linkLayer, mountJailProblem, prepareSerialLog, showLayers, viewFolders, type QemuView } from './mount-jail';
import type { Cidr } from '../../net/special-addresses';

/** Users per installation: uidBase + 1 … uidBase + USERS. */
const USERS = 65_535;
const USER_FILE = 'jail-user';

export interface JailUser {
  uid: number;
  gid: number;
}

/** The files a machine's QEMU is to see besides its run folder (see mount-jail.ts). */
export interface QemuFiles {
  /** Its chain's layers (files of the layers folder). */
  layers: string[];
  /** Kernel, initrd and the image disks its chain ends on. */
  readOnly: string[];
}

export interface JailProblem {
  reason: string;
  hint: string;
}

export interface JailSettings {
  /** The folders the jail users pass through (data, machines, layers, images). */
  machinesDir: string;
  layersDir: string;
  passThrough: string[];
  uidBase: number;
  egress: { mode: EgressMode; allow: Cidr[] };
  logger: EgressWatchLogger;
}

/** What the machine host asks of the jail; QemuMachineHost depends on this, not on HostJail. */
export interface MachineJail {
  /** Null once the host is ready to run jailed machines; else why not and what to do. */
  problem(): Promise<JailProblem | null>;
  /** A new machine's folders and user (a machine made before the jail gets them at its next start). */
  admit(id: string): Promise<JailUser>;
  hasUser(id: string): boolean;
  userOf(id: string): JailUser;
  /** The file becomes the machine's own disk layer: read-write for its user, nobody else, and in its QEMU's view. */
  ownLayer(id: string, file: string): void;
  /** Its QEMU's view holds exactly these layers (after a compaction dropped one). */
  showLayers(id: string, layers: string[]): void;
  /**
   * Its user may read these layers (the chain it shares with the machine `sourceId` it was forked
   * from): refused when the source's own user may not read one of them, so a fork never gains
   * access its source did not have.
   */
  shareLayers(id: string, sourceId: string, files: string[]): Promise<void>;
  /** Its user may read these files (a named snapshot's disk its own disk backs onto); releaseLayers takes that back. */
  grantRead(id: string, files: string[]): Promise<void>;
  /** Throws unless its user may read every one of these files (what a chain its QEMU wrote may name). */
  assertReadable(id: string, files: string[]): Promise<void>;
  /** At delete: layers another chain still uses lose every access of this machine's user. */
  releaseLayers(id: string, files: string[]): Promise<void>;
  /** Before QEMU starts: limits applied, its view of `files` made, run folder handed to the user; the launch wrapper. */
  beforeStart(id: string, shape: MachineShapeLimits, files: QemuFiles): Promise<NonNullable<StartOptions['launch']>>;
  /**
   * After QEMU has made its sockets and before the guest runs: the run folder is root's again, and
   * the network rules checked since beforeStart are known to be in place.
   */
  seal(id: string): Promise<void>;
  /** After QEMU is gone. */
  afterStop(id: string): void;
}

/** How long a failed host check stands before it is made again (starts and GET /v1/status ask often). */
const RECHECK_FAILED_MS = 5_000;

interface PreparedCheck {
  result: Promise<JailProblem | null>;
  /** Its outcome once known. */
  problem: JailProblem | null;
  /** Set when it failed. */
  failedAt?: number;
}

export class HostJail implements MachineJail {
  private readonly firewall: HostFirewall;
  private readonly egress: EgressWatch;
  private readonly gid: number;
  private limits: MachineLimits | undefined;
  /** Per machine starting: the check that its network rules are loaded (awaited by seal). */
  private readonly firewallChecks = new Map<string, Promise<void>>();
  private prepared: PreparedCheck | undefined;

  constructor(private readonly settings: JailSettings) {
    this.gid = settings.uidBase;
    const uids = { first: settings.uidBase + 1, last: settings.uidBase + USERS };
    this.firewall = new HostFirewall({
      table: egressTable(settings.uidBase),
      uids,
      mode: settings.egress.mode,
      allow: settings.egress.allow,
      resolvers: readResolvers(),
    });
    this.egress = new EgressWatch(this.firewall, new JailFreezer(uids), settings.logger);
  }

  /**
   * Prepares the host (firewall, folders, cgroups) and tells what is missing, also while the network
   * rules are not in place. A check that passed holds; one that failed is made again by the next
   * caller after RECHECK_FAILED_MS, so an operator who mends the host needs no restart.
   */
  problem(): Promise<JailProblem | null> {
    const last = this.prepared;
    if (!last || (last.failedAt !== undefined && Date.now() - last.failedAt >= RECHECK_FAILED_MS)) this.prepared = this.check(last);
    return this.prepared!.result.then((problem) => problem ?? this.egress.settledProblem());
  }

  private check(last: PreparedCheck | undefined): PreparedCheck {
    const result = this.prepare().catch((error: Error): JailProblem => ({ reason: `the host check failed: ${error.message}`, hint: 'See the service log; kiste checks again at the next machine start.' }));
    const entry: PreparedCheck = { result, problem: null };
    void result.then((problem) => {
      entry.problem = problem;
      if (problem) entry.failedAt = Date.now();
      if (!last) return; // the first check's outcome is the start-up's to log
      if (!problem && last.problem) this.settings.logger.info({}, 'machine jail ready: the host was mended, machines start again');
      else if (problem && problem.reason !== last.problem?.reason) this.settings.logger.error(problem, 'machines cannot be isolated from this host: none starts until this is mended (checked again when one is to start)');
    });
    return entry;
  }

  private async prepare(): Promise<JailProblem | null> {
    if (process.getuid?.() !== 0) {
      return { reason: 'kiste is not running as root, so it cannot run machines as users of their own', hint: 'Start kiste as root (it also builds images and drives QEMU).' };
    }
    for (const [tool, pkg] of [['nft', 'nftables'], ['setfacl', 'acl'], ['setpriv', 'util-linux']] as const) {
      if (!onPath(tool)) return { reason: `${tool} is not installed`, hint: `Install it: apt-get install ${pkg}` };
    }
    const taken = usersInRange(this.settings.uidBase, USERS);
    if (taken.length) {
      return { reason: `uids ${this.settings.uidBase}–${this.settings.uidBase + USERS} hold existing users (${taken.slice(0, 3).join(', ')})`, hint: 'Choose another KISTE_MACHINE_UID_BASE.' };
    }
    await this.egress.start(); // from now on the rules are watched; problem() tells while they are not in place
    const folders = { own: [this.settings.machinesDir, this.settings.layersDir], passThrough: this.settings.passThrough };
    const folderProblem = await openJailFolders(folders, this.gid, (opened) => {
      this.settings.logger.info({ folders: opened, gid: this.gid }, 'machine users may pass through these folders (ACL, no listing)');
    });
    if (folderProblem) return folderProblem;
    const viewProblem = await mountJailProblem({ machines: this.settings.machinesDir, layers: this.settings.layersDir }, this.gid);
    if (viewProblem) return viewProblem;
    this.limits = new MachineLimits(detectCgroups());
    const mode = this.limits.mode;
    if (mode.kind === 'none') this.settings.logger.warn({ reason: mode.reason }, 'machines run without CPU and memory limits');
    else this.settings.logger.info({ cgroups: mode.kind }, 'machine CPU and memory limits from cgroups');
    return null;
  }

  async admit(id: string): Promise<JailUser> {
    const dir = this.machineDir(id);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    chmodSync(dir, 0o700); // also a folder made before the jail (0755)
    // Allocation and record happen in one synchronous stretch: no other admit can interleave.
    const user = existsSync(join(dir, USER_FILE)) ? this.userOf(id) : this.allocate(dir);
    const run = join(dir, 'run');
    mkdirSync(run, { recursive: true, mode: 0o700 });
    await grant([dir, run], { uid: user.uid }, 'x');
    return user;
  }

  hasUser(id: string): boolean {
    return existsSync(join(this.machineDir(id), USER_FILE));
  }

  userOf(id: string): JailUser {
    const uid = Number(readFileSync(join(this.machineDir(id), USER_FILE), 'utf8'));
    if (!Number.isInteger(uid) || uid <= this.settings.uidBase || uid > this.settings.uidBase + USERS) throw new Error(`machine ${id} has no valid jail user`);
    return { uid, gid: this.gid };
  }

  ownLayer(id: string, file: string): void {
    const user = this.userOf(id);
    chownSync(file, user.uid, user.gid);
    chmodSync(file, 0o600);
    linkLayer(viewFolders(this.machineDir(id)).layers, this.settings.layersDir, file);
  }

  showLayers(id: string, layers: string[]): void {
    showLayers(viewFolders(this.machineDir(id)).layers, this.settings.layersDir, layers);
  }

  async shareLayers(id: string, sourceId: string, files: string[]): Promise<void> {
    const source = this.userOf(sourceId);
    for (const file of files) {
      if (!(await readableBy(file, source.uid))) throw new Error(`the disk of ${sourceId} names ${file}, which is not its own to share`);
    }
    await grant(files, { uid: this.userOf(id).uid }, 'r');
  }

  async assertReadable(id: string, files: string[]): Promise<void> {
    const user = this.userOf(id);
    for (const file of files) {
      if (!(await readableBy(file, user.uid))) throw new Error(`the disk of ${id} names ${file}, which is not its own`);
    }
  }

  async grantRead(id: string, files: string[]): Promise<void> {
    await grant(files, { uid: this.userOf(id).uid }, 'r');
  }

  async releaseLayers(id: string, files: string[]): Promise<void> {
    const user = this.userOf(id);
    const kept = files.filter((file) => existsSync(file));
    for (const file of kept) if (lstatSync(file).uid === user.uid) chownSync(file, 0, 0);
    await revoke(kept, { uid: user.uid });
  }

  async beforeStart(id: string, shape: MachineShapeLimits, files: QemuFiles): Promise<NonNullable<StartOptions['launch']>> {
    const problem = await this.problem();
    if (problem) throw new Error(`${problem.reason}. ${problem.hint}`);
    // Checked while QEMU starts (the guest is paused until seal, which awaits it): no time added.
    const check = this.egress.verified();
    check.catch(() => undefined); // a failure is seal's to report; a start that never got there has its own
    this.firewallChecks.set(id, check);
    const user = this.userOf(id);
    const procs = this.limits!.apply(id, shape);
    const view = this.qemuView(id, user, files);
    chownSync(view.run, user.uid, user.gid); // last: the caller seals it again whatever happens next
    // The shell puts itself (the pid QEMU will have) into the machine's groups, then becomes unshare,
    // the view's script, setpriv and QEMU: limits hold from QEMU's first allocation on.
    const join_ = procs.map((file) => `echo $$ > ${shellQuote(file)} || exit 125; `).join('');
    return (command, args) => ({ command: '/bin/sh', args: ['-c', `${join_}exec "$@"`, 'kiste-jail', ...inMountJail(view, command, args)] });
  }

  /** While no QEMU of the machine runs: its layer view made, its serial log ready, the root's mount point there. */
  private qemuView(id: string, user: JailUser, files: QemuFiles): QemuView {
    const dir = this.machineDir(id);
    const folders = viewFolders(dir);
    const { runDir, serialLog } = machineFiles(dir);
    mkdirSync(folders.root, { recursive: true, mode: 0o700 });
    showLayers(folders.layers, this.settings.layersDir, files.layers);
    prepareSerialLog(serialLog, user);
    return { root: folders.root, run: runDir, layers: { view: folders.layers, at: this.settings.layersDir }, readOnly: files.readOnly, serialLog, user };
  }

  async seal(id: string): Promise<void> {
    const user = this.userOf(id);
    const run = join(this.machineDir(id), 'run');
    const firewallCheck = this.firewallChecks.get(id);
    this.firewallChecks.delete(id);
    if (lstatSync(run).uid !== 0) {
      chownSync(run, 0, 0);
      // Whatever mode or ACL entries QEMU set while the folder was its own go: passable by it alone.
      await Promise.all([setAcl(run, `u::rwx,g::-,o::-,u:${user.uid}:x,m::x`), firewallCheck]);
    } else {
      await firewallCheck;
    }
    // The folder is root's now and nothing new appears in it: keep only what QEMU was to make, of
    // the kind it was to make (no links, FIFOs or folders the service could be led through).
    for (const name of readdirSync(run)) {
      const stat = lstatSync(join(run, name));
      const expected = (RUN_ENTRIES.sockets as readonly string[]).includes(name) ? stat.isSocket() : (RUN_ENTRIES.files as readonly string[]).includes(name) && stat.isFile();
      if (!expected) rmSync(join(run, name), { recursive: true, force: true });
    }
  }

  afterStop(id: string): void {
    this.limits?.remove(id);
  }

  /** At shutdown: stops watching the network rules (they stay; so do machines it had to freeze). */
  stopWatching(): Promise<void> {
    return this.egress.stop();
  }

  /** Test and tear-down use: stops watching and removes this installation's network rules. */
  async unloadFirewall(): Promise<void> {
    await this.egress.stop();
    await this.firewall.unload();
  }

  /**
   * A free user: no machine folder records it and no process runs as it (a QEMU of a deleted
   * machine that is somehow still alive keeps its uid from being handed to a new machine).
   */
  private allocate(dir: string): JailUser {
    const used = new Set<number>(processUids());
    for (const other of readdirSync(this.settings.machinesDir)) {
      try {
        used.add(Number(readFileSync(join(this.settings.machinesDir, other, USER_FILE), 'utf8')));
      } catch {
        // a machine folder without a user yet
      }
    }
    if (used.size >= USERS) throw new Error('no free machine user left');
    let uid: number;
    do uid = this.settings.uidBase + randomInt(1, USERS + 1);
    while (used.has(uid));
    writeFileSync(join(dir, USER_FILE), String(uid), { mode: 0o600 });
    return { uid, gid: this.gid };
  }

  private machineDir(id: string): string {
    return join(this.settings.machinesDir, id);
  }
}

function processUids(): number[] {
  const uids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = lstatSync(`/proc/${entry}`, { throwIfNoEntry: false });
    if (stat) uids.push(stat.uid);
  }
  return uids;
}

function readResolvers(): string[] {
  try {
    return resolversOf(readFileSync('/etc/resolv.conf', 'utf8'));
  } catch {
    return [];
  }
}

function onPath(tool: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Names of users (every NSS source getent lists) whose uid lies in the range: they would share a machine's rights. */
function usersInRange(base: number, count: number): string[] {
  try {
    return execFileSync('getent', ['passwd'], { encoding: 'utf8', timeout: 10_000 })
      .split('\n')
      .map((line) => line.split(':'))
      .filter((fields) => Number(fields[2]) >= base && Number(fields[2]) <= base + count)
      .map((fields) => fields[0]!);
  } catch {
    return [];
  }
}
