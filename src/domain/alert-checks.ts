// Alerts no request causes, found by periodic checks:
// - api_key_expiring: a live API key made for more than API_KEY_WARNING_DAYS expires within them
//   (a key made for a shorter time was meant to be short-lived). Once per key.
// - disk_almost_full: a running machine's disk (guest metrics) is DISK_FULL_PERCENT full or more.
//   Once per occurrence: the next alert needs the usage to have fallen below DISK_CLEAR_PERCENT
//   first (no alert storm around the threshold, and none again after an acknowledgement while
//   the disk stays full, across stops and starts of the machine too). The occurrence is
//   remembered in the process; on the first look after a service start, a full disk whose last
//   alert was acknowledged less than a day before counts as the same occurrence.
import type { CapacityMetrics } from '../protocol/agent';
import type { GuestAgents } from '../compute/machine-host';
import { raiseAlert, type AlertStore } from '../store/alerts';
import type { ApiTokenStore } from '../store/api-tokens';
import type { Instance, InstanceStore } from '../store/instances';
import type { Clock } from './clock';
import type { Transactions } from './transactions';

export const API_KEY_WARNING_DAYS = 7;
export const DISK_FULL_PERCENT = 90;
export const DISK_CLEAR_PERCENT = 85;
const DAY_MS = 86_400_000;
const METRICS_TIMEOUT_MS = 10_000;

export interface DiskThresholds {
  /** Usage (percent) at which an occurrence starts. */
  fullPercent: number;
  /** Usage below which it ends. */
  clearPercent: number;
}

/**
 * Used share of the disk in percent (one decimal), or null when the guest reported no size or more
 * used than there is. The figures are the guest's (checked finite and in range by the agent
 * client's shapes); this keeps an alert's text at 0-100 %.
 */
export function diskUsagePercent(disk: CapacityMetrics): number | null {
  if (!(disk.total_mib > 0) || !(disk.used_mib >= 0) || disk.used_mib > disk.total_mib) return null;
  return Math.round((1000 * disk.used_mib) / disk.total_mib) / 10;
}

/**
 * The disk decision: given whether an occurrence is open (undefined: not known yet) and the usage
 * now, whether one is open afterwards and whether this is the moment to raise the alert.
 */
export function diskDecision(open: boolean | undefined, percent: number | null, thresholds: DiskThresholds = { fullPercent: DISK_FULL_PERCENT, clearPercent: DISK_CLEAR_PERCENT }): { open: boolean; raise: boolean } {
  if (percent === null) return { open: open ?? false, raise: false };
  if (open) return { open: percent >= thresholds.clearPercent, raise: false };
  const full = percent >= thresholds.fullPercent;
  return { open: full, raise: full };
}

export interface AlertCheckLogger {
  warn(object: object, message: string): void;
}

export class AlertChecks {
  /** Running instances with an open disk occurrence (true) or seen below it (false). */
  private readonly diskOpen = new Map<string, boolean>();

  constructor(
    private readonly transactions: Transactions,
    private readonly stores: { alerts: AlertStore; instances: InstanceStore; apiTokens: ApiTokenStore },
    private readonly host: GuestAgents,
    private readonly clock: Clock,
    private readonly logger: AlertCheckLogger,
    private readonly thresholds: DiskThresholds = { fullPercent: DISK_FULL_PERCENT, clearPercent: DISK_CLEAR_PERCENT },
  ) {}

  /** Background: one alert per API key that expires soon; how many were raised. */
  async apiKeysExpiring(): Promise<number> {
    const now = this.clock.now();
    const window = API_KEY_WARNING_DAYS * DAY_MS;
    const keys = await this.stores.apiTokens.expiringBy(now, new Date(now.getTime() + window));
    let raised = 0;
    for (const key of keys) {
      if (key.expiresAt.getTime() - key.createdAt.getTime() <= window) continue; // made short-lived on purpose
      if (await this.stores.alerts.latest(key.accountId, 'api_key_expiring', 'api_token', key.id)) continue; // already told
      const days = Math.max(1, Math.ceil((key.expiresAt.getTime() - now.getTime()) / DAY_MS));
      try {
        const id = await this.transactions.run((tx) =>
          raiseAlert(tx, key.accountId, {
            kind: 'api_key_expiring',
            title: `API key "${key.label}" expires in ${days} day${days === 1 ? '' : 's'}`,
            detail: `The API key "${key.label}" (${key.tokenHint}) expires at ${key.expiresAt.toISOString()}. Scripts that use it stop working then: create a new key with POST /v1/api-tokens and replace it.`,
            resourceType: 'api_token',
            resourceId: key.id,
            once: true,
          }),
        );
        if (id) raised++;
      } catch (error) {
        this.logger.warn({ err: error, apiToken: key.id }, 'could not raise the API key expiry alert');
      }
    }
    return raised;
  }

  /** Background: reads every running machine's disk usage; how many alerts were raised. */
  async disksAlmostFull(): Promise<number> {
    const running = await this.stores.instances.runningIdle();
    const ids = new Set(running.map((instance) => instance.id));
    for (const [id, open] of this.diskOpen) {
      // The disk outlives a stop: an open occurrence is kept until the machine is gone.
      if (!ids.has(id) && (!open || !(await this.stores.instances.findById(id)))) this.diskOpen.delete(id);
    }
    let raised = 0;
    for (const instance of running) {
      try {
        if (await this.checkDisk(instance)) raised++;
      } catch (error) {
        // The guest may be busy, stopping or not answering yet: the next round asks again.
        this.logger.warn({ err: error, instance: instance.id }, 'disk usage check failed');
      }
    }
    return raised;
  }

  private async checkDisk(instance: Instance): Promise<boolean> {
    const { disk } = await this.host.agent(instance.id).metrics(10, { timeoutMs: METRICS_TIMEOUT_MS });
    const percent = diskUsagePercent(disk);
    const known = this.diskOpen.get(instance.id);
    const decision = diskDecision(known, percent, this.thresholds);
    this.diskOpen.set(instance.id, decision.open);
    if (!decision.raise) return false;
    if (known === undefined) {
      // First look in this process: an occurrence acknowledged shortly before a restart is the same one.
      const latest = await this.stores.alerts.latest(instance.accountId, 'disk_almost_full', 'instance', instance.id);
      if (latest?.acknowledgedAt && this.clock.now().getTime() - latest.acknowledgedAt.getTime() < DAY_MS) return false;
    }
    const id = await this.transactions.run((tx) =>
      raiseAlert(tx, instance.accountId, {
        kind: 'disk_almost_full',
        title: `Disk of ${instance.name} is ${Math.floor(percent!)} % full`,
        detail: `The disk of machine ${instance.name} is ${percent} % full: ${disk.used_mib} MiB of ${disk.total_mib} MiB used, ${disk.available_mib} MiB free. Remove files in the machine, or move data elsewhere before it fills up.`,
        resourceType: 'instance',
        resourceId: instance.id,
      }),
    );
    return id !== null;
  }
}
