// time.set (a restored guest's clock is behind by however long it was saved), fs.sync (before a
// disk checkpoint) and shutdown.
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import type { TimeSetResult } from '../../src/protocol/agent';
import { runCommand } from './commands';
import type { AgentConfig } from './config';
import type { Logger } from './log';
import { Reply } from './session';
import { bool, int, object } from './validate';

export async function setTime(raw: unknown, config: AgentConfig): Promise<TimeSetResult> {
  const epochMs = int(object(raw), 'epoch_ms', { min: 0, max: 8.64e15 }) as number;
  const previous = Date.now();
  await runCommand('date', ['-u', '-s', `@${(epochMs / 1000).toFixed(3)}`], config.commandEnv);
  return { previous_epoch_ms: previous, epoch_ms: Date.now() };
}

export async function syncFilesystems(config: AgentConfig): Promise<Record<string, never>> {
  await runCommand('sync', [], config.commandEnv, 300_000);
  return {};
}

export async function shutdown(raw: unknown, config: AgentConfig, log: Logger): Promise<Reply> {
  const reboot = bool(object(raw), 'reboot');
  const systemd = await fs.stat(join(config.root, 'run/systemd/system')).then(
    () => true,
    () => false,
  );
  const [file, args] = systemd ? ['systemctl', [reboot ? 'reboot' : 'poweroff']] : [reboot ? 'reboot' : 'poweroff', []];
  // Answer first: once the command runs, the link may go at any moment.
  return new Reply({ accepted: true }, undefined, () => {
    log.info('shutting down', { reboot });
    runCommand(file as string, args as string[], config.commandEnv).catch((error: Error) => log.error('shutdown failed', { error: error.message }));
  });
}
