// The public platform status: component checks now (the API, the database, whether machines can
// start), and seven-day uptime from one heartbeat row per minute in which a service process was up.
import type { HeartbeatStore } from '../store/heartbeats';
import type { Clock } from './clock';
import type { MachineAvailability } from './machine-availability';

const WEEK_MS = 7 * 24 * 3600_000;
type ComponentState = 'operational' | 'degraded' | 'outage';

export interface PlatformReport {
  checkedAt: Date;
  components: { name: string; status: ComponentState }[];
  uptime7dPercent: number;
}

function minuteOf(date: Date): Date {
  return new Date(Math.floor(date.getTime() / 60_000) * 60_000);
}

/** Public: the state only; why (the jail's reason, the build's error) is for signed-in users (GET /v1/status). */
function machineState(machines: MachineAvailability): ComponentState {
  if (machines.available) return 'operational';
  return machines.cause === 'image_building' || machines.cause === 'compute_unreachable' ? 'degraded' : 'outage';
}

export class Platform {
  constructor(
    private readonly heartbeats: HeartbeatStore,
    private readonly clock: Clock,
    private readonly machines: () => Promise<MachineAvailability>,
  ) {}

  async heartbeat(): Promise<void> {
    const now = this.clock.now();
    await this.heartbeats.beat(minuteOf(now));
    await this.heartbeats.prune(new Date(now.getTime() - WEEK_MS));
  }

  async report(): Promise<PlatformReport> {
    const now = this.clock.now();
    const database: ComponentState = await this.heartbeats.ping().then(() => 'operational' as const, () => 'outage' as const);
    let uptime = 0;
    if (database === 'operational') {
      const since = new Date(now.getTime() - WEEK_MS);
      const oldest = await this.heartbeats.oldestSince(since);
      const beats = await this.heartbeats.countSince(since);
      const minutes = oldest ? Math.floor((minuteOf(now).getTime() - oldest.getTime()) / 60_000) + 1 : 0;
      uptime = minutes > 0 ? Math.min(100, Math.round((beats / minutes) * 100_000) / 1000) : 100;
    }
    const machines = await this.machines();
    return {
      checkedAt: now,
      components: [
        { name: 'api', status: 'operational' },
        { name: 'database', status: database },
        { name: 'machines', status: machineState(machines) },
      ],
      uptime7dPercent: uptime,
    };
  }
}
