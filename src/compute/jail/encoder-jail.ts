// Where the video encoders of desktop streams run. An encoder (ffmpeg, one per stream) is started by
// the service but works for a tenant: how much it costs follows from what the guest draws and how
// many viewers the tenant opens. So it runs
// - niced (nice 10: machines and the service come first; vp8-encoder.ts),
// - in the cgroup `kiste/encoders/<account>`: all encoders together get at most ENCODER_CPUS and
//   ENCODER_MEMORY_MIB, each account an equal CPU share of that while accounts compete (eight
//   streams of one account do not starve another account's one) and at most
//   ENCODER_MEMORY_MIB_PER_ACCOUNT (cgroups.ts; v2 or v1, whichever the host has; none where no
//   hierarchy is writable, as for machines),
// - and, when the service runs as root, as the uid KISTE_MACHINE_UID_BASE itself (reserved for kiste,
//   no machine has it, so neither the machines' egress rules nor their freezer touch it) in group
//   nogroup, without capabilities or supplementary groups and with no_new_privs: it needs no file,
//   only its pipes and a UDP socket on loopback.
import { availableParallelism } from 'node:os';
import { applyGroup, applyParentGroup, detectCgroups, inGroups, removeGroup, type CgroupMode } from './cgroups';

/** All encoders together: at most half the host's CPUs (at least one). */
export const ENCODER_CPUS = Math.max(1, Math.floor(availableParallelism() / 2));
/** A 2560×1600 stream's encoder was measured at 220 MB (RSS): eight of them per account. */
export const ENCODER_MEMORY_MIB_PER_ACCOUNT = 2048;
export const ENCODER_MEMORY_MIB = 4096;
const ENCODER_TASKS_PER_ACCOUNT = 256;
const PARENT = 'encoders';
const NOGROUP = 65_534;

/** How one encoder is started, and what to do once it exited. */
export interface EncoderPlacement {
  wrap(command: string, args: string[]): { command: string; args: string[] };
  /** The encoder's process is gone. */
  left(): void;
}

export interface EncoderJailSettings {
  /** KISTE_MACHINE_UID_BASE: encoders run as this uid. */
  uidBase: number;
  /** Where cgroups are mounted (tests point it elsewhere). */
  cgroupBase?: string;
  /** Whether to drop to the encoders' user (default: when the service runs as root). */
  dropPrivileges?: boolean;
}

export class EncoderJail {
  private cgroups: CgroupMode | undefined;
  /** Encoders running per account: its group goes with the last one. */
  private readonly running = new Map<string, number>();

  constructor(private readonly settings: EncoderJailSettings) {}

  /** The cgroup hierarchy in use (detected, and the parent group made, on first use). */
  mode(): CgroupMode {
    if (!this.cgroups) {
      this.cgroups = detectCgroups(this.settings.cgroupBase);
      if (this.cgroups.kind !== 'none') {
        applyParentGroup(this.cgroups, PARENT, { share: 1, cpus: ENCODER_CPUS, memoryBytes: ENCODER_MEMORY_MIB * 1048576, tasks: null });
      }
    }
    return this.cgroups;
  }

  /** Starts one encoder of the account's in its place (the account's group is made as it is needed). */
  placement(accountId: string): EncoderPlacement {
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(accountId)) throw new Error(`not an account id: ${JSON.stringify(accountId)}`);
    const mode = this.mode();
    const group = `${PARENT}/${accountId}`;
    // Made (or its limits written again) and counted in one synchronous stretch: an encoder of the
    // account that exits meanwhile cannot remove the group under this one.
    const procs = applyGroup(mode, group, { share: 1, cpus: null, memoryBytes: ENCODER_MEMORY_MIB_PER_ACCOUNT * 1048576, tasks: ENCODER_TASKS_PER_ACCOUNT });
    this.running.set(accountId, (this.running.get(accountId) ?? 0) + 1);
    let gone = false;
    return {
      wrap: (command, args) => {
        const [program, ...rest] = this.asEncoderUser(command, args);
        return inGroups(procs, program!, rest);
      },
      left: () => {
        if (gone) return;
        gone = true;
        const left = (this.running.get(accountId) ?? 1) - 1;
        if (left > 0) return void this.running.set(accountId, left);
        this.running.delete(accountId);
        removeGroup(mode, group);
      },
    };
  }

  private asEncoderUser(command: string, args: string[]): string[] {
    const drop = this.settings.dropPrivileges ?? process.getuid?.() === 0;
    if (!drop) return [command, ...args];
    return [
      'setpriv', `--reuid=${this.settings.uidBase}`, `--regid=${NOGROUP}`, '--clear-groups',
      '--inh-caps=-all', '--bounding-set=-all', '--no-new-privs', '--', command, ...args,
    ];
  }
}
