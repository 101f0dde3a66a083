// Starts test/support/smtp-relay-server.ts as a child process (a real SMTP server on loopback) and
// collects the messages it received, for tests that check the e-mail the service sends.
import { ChildProcess, spawn } from 'node:child_process';
import { join, resolve } from 'node:path';

const REPO = resolve(__dirname, '../..');

export interface ReceivedMail {
  /** The authenticated SMTP user, or null. */
  auth: string | null;
  envelope: { from: string | null; to: string[] };
  /** Header names in lower case; encoded words decoded. */
  headers: Record<string, string>;
  /** The decoded plain text. */
  text: string;
}

export interface SmtpRelayOptions {
  /** 0 (default): any free port. */
  port?: number;
  /** Require AUTH with this user and password. */
  user?: string;
  pass?: string;
  /** Refuse recipients containing this with a permanent 550. */
  reject?: string;
}

export class SmtpRelay {
  readonly messages: ReceivedMail[] = [];
  private exited: Promise<void>;
  private waiters: (() => void)[] = [];

  private constructor(
    private readonly child: ChildProcess,
    readonly port: number,
  ) {
    this.exited = new Promise((done) => child.once('exit', () => done()));
  }

  static async start(options: SmtpRelayOptions = {}): Promise<SmtpRelay> {
    // One node process (tsx as a loader, not its CLI wrapper), so a kill frees the port at once.
    const child = spawn(process.execPath, ['--import', 'tsx', join(REPO, 'test/support/smtp-relay-server.ts')], {
      cwd: REPO,
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        SMTP_RELAY_PORT: String(options.port ?? 0),
        ...(options.user ? { SMTP_RELAY_USER: options.user, SMTP_RELAY_PASS: options.pass ?? '' } : {}),
        ...(options.reject ? { SMTP_RELAY_REJECT: options.reject } : {}),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let relay: SmtpRelay | null = null;
    const stderr: string[] = [];
    child.stderr!.on('data', (chunk: Buffer) => stderr.push(chunk.toString('utf8')));
    const port = await new Promise<number>((resolvePort, reject) => {
      let buffered = '';
      child.stdout!.on('data', (chunk: Buffer) => {
        buffered += chunk.toString('utf8');
        const lines = buffered.split('\n');
        buffered = lines.pop() ?? '';
        for (const line of lines) {
          if (!line.trim()) continue;
          const parsed = JSON.parse(line) as { event: string; port?: number } & ReceivedMail;
          if (parsed.event === 'listening') resolvePort(parsed.port!);
          else if (parsed.event === 'message') relay?.received({ auth: parsed.auth, envelope: parsed.envelope, headers: parsed.headers, text: parsed.text });
        }
      });
      child.once('exit', (code) => reject(new Error(`SMTP relay exited (${code}): ${stderr.join('')}`)));
    });
    relay = new SmtpRelay(child, port);
    return relay;
  }

  /** Messages whose envelope goes to `address`. */
  to(address: string): ReceivedMail[] {
    return this.messages.filter((mail) => mail.envelope.to.includes(address));
  }

  /** Waits until `count` messages went to `address`. */
  async waitFor(address: string, count = 1, timeoutMs = 10_000): Promise<ReceivedMail[]> {
    const deadline = Date.now() + timeoutMs;
    while (this.to(address).length < count) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`expected ${count} message(s) to ${address}, got ${this.to(address).length}`);
      await new Promise<void>((done) => {
        const timer = setTimeout(done, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          done();
        });
      });
    }
    return this.to(address);
  }

  async stop(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
    await this.exited;
  }

  private received(mail: ReceivedMail): void {
    this.messages.push(mail);
    for (const wake of this.waiters.splice(0)) wake();
  }
}
