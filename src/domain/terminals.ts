// Browser terminals: a login shell on a pseudo-terminal in the guest, reached with a short-lived
// capability. The shell runs under `script` (util-linux, in every image), which gives it a PTY and
// relays it over the agent's exec stdin/stdout; a resize sets the PTY's size with `stty`, and the
// kernel tells the shell (SIGWINCH). The session outlives its client for a while: reconnecting
// with the same capability reattaches to the same shell and first replays the recent output.
// Sessions live in this process (a service restart ends them: the agent stops their commands).
import { KisteError } from '../errors';
import { AccountSlots } from './account-slots';
import type { ExecStream } from '../compute/guest-agent';
import type { GuestAgents } from '../compute/machine-host';
import type { Clock } from './clock';
import type { Instances } from './instances';
import { newId, newToken, sha256Hex } from './secrets';

export const TERMINAL_TOKEN_PREFIX = 'kiste_term_';

export interface TerminalSettings {
  /** How long a new capability may wait for its first connection. */
  connectWithinMs: number;
  /** How long a shell whose client went away waits for it to come back. */
  reattachWithinMs: number;
  /** Recent output replayed to a client that reattaches. */
  replayBytes: number;
}

export const DEFAULT_TERMINAL_SETTINGS: TerminalSettings = { connectWithinMs: 60_000, reattachWithinMs: 60_000, replayBytes: 64 * 1024 };
/** Terminal sessions an account may have at once (each holds a shell in a guest and a stream through the service). */
export const TERMINALS_PER_ACCOUNT = 16;
const DEFAULT_SIZE = { cols: 80, rows: 24 };
const MAX_SIZE = 1000;
/** Keys typed before the shell started that are held for it; past this the client waits for the shell. */
export const TYPED_EARLY_BYTES = 64 * 1024;

/** The connected client, as the domain sees its transport. */
export interface TerminalPeer {
  output(chunk: Buffer): void;
  /** The shell ended (exit code), or the session ended without one (null). */
  end(exitCode: number | null, reason: string): void;
}

export class TerminalSession {
  readonly id = newId();
  expiresAt: Date;
  cols: number;
  rows: number;
  private shell: ExecStream | null = null;
  private starting: Promise<ExecStream> | null = null;
  private peer: TerminalPeer | null = null;
  private recent: Buffer[] = [];
  private typedEarly: Buffer[] = [];
  private typedEarlyBytes = 0;
  /** Clients' `taken` held until the shell starts (input past TYPED_EARLY_BYTES). */
  private waitingForShell: (() => void)[] = [];
  private recentBytes = 0;
  private clientTimer: NodeJS.Timeout | null = null;
  ended = false;

  constructor(
    readonly accountId: string,
    readonly instanceId: string,
    readonly instanceName: string,
    readonly tokenHash: string,
    size: { cols: number; rows: number },
    private readonly deps: { host: GuestAgents; clock: Clock; settings: TerminalSettings; onEnded: (s: TerminalSession) => void },
  ) {
    this.cols = size.cols;
    this.rows = size.rows;
    this.expiresAt = this.waitForClient(deps.settings.connectWithinMs);
  }

  /** Connects a client (a second one takes over): recent output first, then live output. */
  async attach(peer: TerminalPeer): Promise<void> {
    if (this.ended) throw new KisteError('D04', { message: 'This terminal session has ended' });
    this.stopWaiting();
    const previous = this.peer;
    this.peer = peer;
    previous?.end(null, 'another client took over this terminal');
    for (const chunk of this.recent) peer.output(chunk);
    if (!this.shell) await this.startShell();
  }

  /** The client left: the shell waits reattachWithinMs for it. */
  detach(peer: TerminalPeer): void {
    if (this.peer !== peer || this.ended) return;
    this.peer = null;
    this.expiresAt = this.waitForClient(this.deps.settings.reattachWithinMs);
  }

  /** Keys from the client; `taken` runs once the guest accepted them (the transport waits for it: a paste cannot pile up here). */
  input(data: Buffer, taken: () => void): void {
    if (this.ended) return taken();
    // Keys typed while the shell starts wait for it (the PTY buffers them until bash reads); a
    // client that types more than TYPED_EARLY_BYTES meanwhile waits for the shell too.
    if (!this.shell?.stdin) {
      this.typedEarly.push(data);
      this.typedEarlyBytes += data.length;
      if (this.typedEarlyBytes <= TYPED_EARLY_BYTES) return taken();
      this.waitingForShell.push(taken);
      return;
    }
    if (this.shell.stdin.write(data)) taken();
    else this.shell.stdin.once('drain', taken);
  }

  /** Sets the PTY size (the shell gets SIGWINCH). */
  async resize(cols: number, rows: number): Promise<void> {
    const size = checkedSize({ cols, rows });
    this.cols = size.cols;
    this.rows = size.rows;
    const shell = this.shell;
    if (!shell || this.ended) return;
    // The PTY is the one `script` gave its child (the login shell): its stdin.
    const script = 'c=$(cut -d" " -f1 /proc/$1/task/$1/children) && stty -F "$(readlink /proc/$c/fd/0)" rows "$2" cols "$3"';
    await this.deps.host.agent(this.instanceId).run({ argv: ['sh', '-c', script, 'sh', String(shell.pid), String(size.rows), String(size.cols)] });
  }

  /** Ends the session: the shell is stopped, the client told. */
  end(reason: string, exitCode: number | null = null): void {
    if (this.ended) return;
    this.ended = true;
    this.stopWaiting();
    void this.shell?.cancel(500).catch(() => undefined);
    this.peer?.end(exitCode, reason);
    this.peer = null;
    this.releaseEarlyInput();
    this.deps.onEnded(this);
  }

  /** Starts the shell once: a client that takes over while it starts waits for the same start. */
  private async startShell(): Promise<void> {
    this.starting ??= this.deps.host
      .agent(this.instanceId)
      .exec({
        // -q quiet, -f flush at once, -e the shell's exit status; the log file is /dev/null.
        argv: ['script', '-qfec', `stty rows ${this.rows} cols ${this.cols}; exec bash -l`, '/dev/null'],
        cwd: null,
        env: { TERM: 'xterm-256color', LANG: 'C.UTF-8' },
        timeout_ms: 0,
        stdin: true,
      })
      .then((shell) => {
        this.shell = shell;
        for (const data of this.typedEarly) shell.stdin?.write(data);
        this.releaseEarlyInput();
        void this.pump(shell);
        return shell;
      });
    try {
      await this.starting;
    } catch (error) {
      this.end(`the shell could not start: ${error instanceof Error ? error.message : String(error)}`);
      throw new KisteError('K03', { message: `Instance ${this.instanceName} cannot start a shell now` });
    }
  }

  private async pump(shell: ExecStream): Promise<void> {
    try {
      for await (const chunk of shell) {
        this.remember(chunk.data);
        this.peer?.output(chunk.data);
      }
      const exit = await shell.exit;
      this.end('the shell exited', exit.exit_code);
    } catch {
      this.end('the machine went away');
    }
  }

  private releaseEarlyInput(): void {
    this.typedEarly = [];
    this.typedEarlyBytes = 0;
    for (const taken of this.waitingForShell.splice(0)) taken();
  }

  private remember(chunk: Buffer): void {
    this.recent.push(chunk);
    this.recentBytes += chunk.length;
    while (this.recentBytes - (this.recent[0]?.length ?? 0) >= this.deps.settings.replayBytes) {
      this.recentBytes -= this.recent.shift()!.length;
    }
  }

  /** Ends the session unless a client connects within ms; answers when that is. */
  private waitForClient(ms: number): Date {
    this.stopWaiting();
    this.clientTimer = setTimeout(() => this.end('nobody connected in time'), ms);
    this.clientTimer.unref();
    return new Date(this.deps.clock.now().getTime() + ms);
  }

  private stopWaiting(): void {
    if (this.clientTimer) clearTimeout(this.clientTimer);
    this.clientTimer = null;
  }
}

export class Terminals {
  private readonly sessions = new Map<string, TerminalSession>();
  private readonly slots = new AccountSlots(TERMINALS_PER_ACCOUNT);

  constructor(
    private readonly instances: Instances,
    private readonly host: GuestAgents,
    private readonly clock: Clock,
    private readonly settings: TerminalSettings = DEFAULT_TERMINAL_SETTINGS,
  ) {}

  /** A new session on a running instance and its capability (shown once; kept only as a hash). */
  async create(accountId: string, name: string, size: { cols?: number | null; rows?: number | null }): Promise<{ session: TerminalSession; token: string }> {
    const checked = checkedSize(size);
    // Held from before the first await until the session ends: creates at once cannot pass the cap together.
    const slot = this.slots.take(accountId, () => new KisteError('L10', { message: `The account already has ${TERMINALS_PER_ACCOUNT} terminals open` }));
    try {
      const instance = await this.instances.running(accountId, name);
      const token = newToken(TERMINAL_TOKEN_PREFIX);
      const session = new TerminalSession(accountId, instance.id, instance.name, sha256Hex(token), checked, {
        host: this.host,
        clock: this.clock,
        settings: this.settings,
        onEnded: (s) => {
          this.sessions.delete(s.tokenHash);
          slot.release();
        },
      });
      this.sessions.set(session.tokenHash, session);
      return { session, token };
    } catch (error) {
      slot.release();
      throw error;
    }
  }

  /** Terminal sessions the account has (or is making). */
  count(accountId: string): number {
    return this.slots.count(accountId);
  }

  /** The live session a capability names; 403 D04 when there is none. */
  byToken(token: string): TerminalSession {
    const session = this.sessions.get(sha256Hex(token));
    if (!session || session.ended) throw new KisteError('D04');
    return session;
  }

  /** Machines with a terminal open through this process. */
  machinesInUse(): string[] {
    return [...this.sessions.values()].map((session) => session.instanceId);
  }

  /** Signing out everywhere closes the account's terminals. */
  closeAccount(accountId: string): void {
    for (const session of [...this.sessions.values()]) if (session.accountId === accountId) session.end('signed out everywhere');
  }

  closeAll(): void {
    for (const session of [...this.sessions.values()]) session.end('the service is stopping');
  }
}

function checkedSize(size: { cols?: number | null; rows?: number | null }): { cols: number; rows: number } {
  const cols = size.cols || DEFAULT_SIZE.cols;
  const rows = size.rows || DEFAULT_SIZE.rows;
  if (!Number.isInteger(cols) || !Number.isInteger(rows) || cols < 1 || rows < 1 || cols > MAX_SIZE || rows > MAX_SIZE) {
    throw new KisteError('P01', { message: `A terminal is 1 to ${MAX_SIZE} columns and rows`, param: 'cols' });
  }
  return { cols, rows };
}
