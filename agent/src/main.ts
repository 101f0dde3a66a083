// kiste guest agent: entry point. Run by the image's Node at boot (kiste-agent.service).
import { loadConfig } from './config';
import { disposeExec } from './exec';
import { createHandlers } from './handlers';
import { startLink } from './link';
import { createLogger } from './log';
import { Readiness } from './readiness';
import { Session } from './session';
import { AGENT_VERSION } from './version';

function main(): void {
  const config = loadConfig();
  const log = createLogger(config.logLevel);
  let session: Session | null = null;
  const readiness = new Readiness(config, (ready) => session?.broadcast('ready', ready));
  session = new Session(config, log, createHandlers(readiness));
  const s = session;
  const link = startLink(
    config.link,
    {
      open: (l, announce) => s.attach(l, announce),
      data: (chunk) => s.data(chunk),
      closed: (l, reason) => s.detach(l, reason),
    },
    log,
  );
  readiness.start();
  log.info('kiste agent started', { version: AGENT_VERSION, link: config.link, pid: process.pid });

  const stop = (signal: NodeJS.Signals) => {
    log.info('stopping', { signal });
    readiness.stop();
    link.stop();
    disposeExec();
    terminate(signal);
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('uncaughtException', (error) => {
    // A bug: log it and go; systemd restarts the agent and the host resynchronises (ANNOUNCE).
    log.error('uncaught exception', { error: error.stack ?? String(error) });
    terminate('SIGKILL');
  });
}

/**
 * Ends the process by the signal's default action. process.exit() would wait for the thread pool,
 * and a file operation blocked there (a hung mount, say) may never return: the agent would hang
 * until systemd's stop timeout (90 s) killed it.
 */
function terminate(signal: NodeJS.Signals): never {
  process.removeAllListeners(signal);
  process.kill(process.pid, signal);
  // Not reached; if the signal were blocked, still do not linger.
  process.kill(process.pid, 'SIGKILL');
  throw new Error('unreachable');
}

main();
