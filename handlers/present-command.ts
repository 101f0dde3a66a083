// Command records → CommandResponse.
import type { components } from '../src/generated/api';
import type { Command } from '../src/store/commands';
import { iso } from './present';

export function presentCommand(command: Command, instanceName: string): components['schemas']['CommandResponse'] {
  return {
    id: command.id,
    object: 'command',
    instance_id: command.instanceId,
    instance_name: instanceName,
    status: command.status,
    started_at: iso(command.startedAt),
    updated_at: iso(command.updatedAt),
    cancel_requested_at: iso(command.cancelRequestedAt),
    completion_status: command.completionStatus as components['schemas']['CommandResponse']['completion_status'],
    duration_ms: command.durationMs === null ? null : Number(command.durationMs),
    error_message: command.errorMessage,
    exit_code: command.exitCode,
    finished_at: iso(command.finishedAt),
    signal: command.signal,
    stderr_bytes: command.stderrBytes === null ? null : Number(command.stderrBytes),
    stdout_bytes: command.stdoutBytes === null ? null : Number(command.stdoutBytes),
  };
}
