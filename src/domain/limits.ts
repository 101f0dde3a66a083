// Numeric account limits and request budgets. The spec fixes some (API keys, webhooks, metrics);
// the rest are this installation's defaults, reported by GET /v1/status. SSH tunnels have theirs
// where they are counted (SshTunnels.perAccount).
import type { Config } from '../config';
import type { RateBudget } from '../generated/operations';

export class Limits {
  readonly apiTokens = 10;
  readonly deviceKeys = 100;
  readonly webhooks = 10;
  /** Hosted services (published ports) per machine (L14). */
  readonly servicesPerMachine = 10;
  /** Named snapshots per account (L15) and the MiB they may hold together (L16). */
  readonly snapshotsPerAccount = 20;
  readonly snapshotMibTotal = 50 * 1024;
  readonly metricsPerMinute = 40;
  readonly machines = 10;
  readonly runningMachines = 4;
  readonly vcpuPerMachine = 4;
  readonly memoryMibPerMachine = 8192;
  readonly diskMibTotal = 4 * 81920;
  /** Failed password sign-ins from unknown browsers, inside the window, that lock the account. */
  readonly signInFailuresBeforeLock = 5;
  readonly signInFailureWindowMs = 15 * 60_000;

  constructor(private readonly config: Pick<Config, 'requestsPerMinute' | 'signInAttemptsPerMinute'>) {}

  get requestsPerMinute(): number {
    return this.config.requestsPerMinute;
  }

  budget(name: RateBudget): number {
    switch (name) {
      case 'metrics':
        return this.metricsPerMinute;
      case 'login':
        return this.config.signInAttemptsPerMinute;
      case 'default':
        return this.config.requestsPerMinute;
    }
  }
}
