// Readiness: commands are accepted as soon as the agent answers; SSH is ready once its port
// accepts a TCP connection. The agent polls until it does and then tells the host unasked.
import * as net from 'node:net';
import type { ReadyResult } from '../../src/protocol/agent';
import type { AgentConfig } from './config';

const POLL_MS = 250;
const PROBE_TIMEOUT_MS = 1000;

export class Readiness {
  private listening = false;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly config: AgentConfig,
    private readonly onReady: (ready: ReadyResult) => void,
  ) {}

  start(): void {
    if (!this.timer && !this.listening) this.schedule(0);
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  async check(): Promise<ReadyResult> {
    const listening = await probe(this.config.sshHost, this.config.sshPort);
    this.observe(listening);
    return { ssh_listening: listening, commands: true };
  }

  private observe(listening: boolean): void {
    const was = this.listening;
    this.listening = listening;
    if (listening && !was) {
      this.stop();
      this.onReady({ ssh_listening: true, commands: true });
    } else if (!listening && !this.timer) {
      this.schedule(POLL_MS); // went away (sshd restarting): announce it again when it is back
    }
  }

  private schedule(delay: number): void {
    this.timer = setTimeout(async () => {
      const listening = await probe(this.config.sshHost, this.config.sshPort);
      this.timer = null;
      this.observe(listening);
    }, delay);
    this.timer.unref();
  }
}

function probe(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(PROBE_TIMEOUT_MS, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}
