// Command rows: one per exec run in an instance (counts and outcome, never the output).
import type { Transaction } from '../domain/transactions';
import type { Command } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';
import { clientFor } from './transactions';

export type { Command };

export interface NewCommand {
  id: string;
  accountId: string;
  instanceId: string;
  requestHash: string;
  /** From the service clock (not the database default). */
  startedAt: Date;
}

/** How a command ended: 'finished' with the agent's exit, or 'failed' with why. */
export interface CommandOutcome {
  status: 'finished' | 'failed';
  completionStatus?: string;
  exitCode?: number;
  signal?: number | null;
  durationMs?: bigint;
  stdoutBytes?: bigint;
  stderrBytes?: bigint;
  errorMessage?: string;
}

export class CommandStore {
  constructor(private readonly db: Db) {}

  /**
   * Whichever account's: a client-chosen id is unique on the host, so the caller looks it up by id
   * alone and refuses one recorded for another account or instance itself (P11).
   */
  findById(id: string): Promise<Command | null> {
    return this.db.command.findUnique({ where: { id } });
  }

  /** Newest first. */
  list(accountId: string, instanceId: string): Promise<Command[]> {
    return this.db.command.findMany({ where: { accountId, instanceId }, orderBy: [{ startedAt: 'desc' }, { id: 'desc' }] });
  }

  find(accountId: string, instanceId: string, id: string): Promise<Command | null> {
    return this.db.command.findFirst({ where: { accountId, instanceId, id } });
  }

  /** A running record; a second one with the same id fails on the unique key (only one request may run it). */
  createRunning(tx: Transaction, command: NewCommand): Promise<Command> {
    return clientFor(tx).command.create({ data: { ...command, status: 'running' } });
  }

  /** By id alone: the caller has found the command in its account first. */
  recordCancelRequest(id: string, at: Date): Promise<Command> {
    return this.db.command.update({ where: { id }, data: { cancelRequestedAt: at } });
  }

  finish(tx: Transaction, id: string, outcome: CommandOutcome, finishedAt: Date): Promise<Command> {
    return clientFor(tx).command.update({ where: { id }, data: { ...outcome, finishedAt } });
  }
}
