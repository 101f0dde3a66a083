// Gives a running guest its identity: host name, authorized keys and, once per disk (a new
// machine, a fork, a copy of a boot snapshot), host keys made here and a machine id of its own.
// What it was last given is recorded beside the disk so that a resume with the same identity
// changes nothing and waits for nothing.
import { createHash, randomBytes } from 'node:crypto';
import type { AgentClient } from './agent-client';
import type { DiskState } from './layers';
import type { GuestIdentity, StartedMachine } from './machine-host';
import { generateHostKeys } from './ssh-host-keys';

export interface PersonaliseOptions {
  /** A machine personalised with the same identity is left as it is (a resumed session has all of it). */
  unlessUnchanged?: boolean;
  /**
   * The guest continues a memory image another machine was saved from: what its running programs
   * cached is renewed too, and its root file system grows to `diskBytes`.
   */
  restored?: { diskBytes?: number };
}

export interface DiskStateAccess {
  read(id: string): DiskState;
  write(id: string, state: DiskState): void;
}

export class GuestPersonalisation {
  constructor(
    private readonly agentOf: (id: string) => AgentClient,
    private readonly disks: DiskStateAccess,
    private readonly bootTimeoutMs: number,
  ) {}

  /**
   * With unlessUnchanged nothing is awaited but the agent, which the caller has: probing SSH again
   * cost ~0.2–0.5 s of a resume under TCG, and sshd's listening socket is restored state.
   */
  async personalise(id: string, identity: GuestIdentity, options: PersonaliseOptions = {}): Promise<StartedMachine> {
    const agent = this.agentOf(id);
    const identityHash = createHash('sha256').update(JSON.stringify([identity.hostname, identity.authorizedKeys])).digest('hex');
    const state = this.disks.read(id);
    if (options.unlessUnchanged && !options.restored && state.hostKeysGenerated && state.personalised?.identity === identityHash) {
      return { hostKeys: state.personalised.hostKeys };
    }
    await agent.waitReady(this.bootTimeoutMs);
    const newKeys = state.hostKeysGenerated ? undefined : generateHostKeys();
    const result = await agent.personalise({
      hostname: identity.hostname,
      authorized_keys: identity.authorizedKeys,
      regenerate_host_keys: newKeys !== undefined,
      host_keys: newKeys?.map((key) => ({ algorithm: key.algorithm, private_key: key.privateKey, public_key: key.publicKey })),
      ...(options.restored ? { restored: { disk_bytes: options.restored.diskBytes, entropy: randomBytes(64).toString('base64') } } : {}),
    });
    const hostKeys = result.host_keys.map((key) => ({ algorithm: key.algorithm, publicKey: key.public_key }));
    this.disks.write(id, { ...this.disks.read(id), hostKeysGenerated: true, personalised: { identity: identityHash, hostKeys } });
    await agent.waitReady(60_000); // sshd restarts after new host keys
    return { hostKeys };
  }
}
