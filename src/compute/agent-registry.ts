// One guest agent client per machine, made on first use and kept while the machine runs; the
// client reconnects by itself across guest agent restarts and memory restores.
import { connect } from 'node:net';
import { AgentClient } from './agent-client';

export class AgentRegistry {
  private readonly agents = new Map<string, AgentClient>();

  /** `socketOf`: where a machine's QEMU serves the agent's virtio-serial port. */
  constructor(
    private readonly socketOf: (id: string) => string,
    private readonly onLinkDropped?: (id: string, reason: string) => void,
  ) {}

  get(id: string): AgentClient {
    let agent = this.agents.get(id);
    if (!agent) {
      const socket = this.socketOf(id);
      agent = new AgentClient({ connect: () => connect(socket), onLinkDropped: (reason) => this.onLinkDropped?.(id, reason) });
      this.agents.set(id, agent);
    }
    return agent;
  }

  drop(id: string): void {
    this.agents.get(id)?.close();
    this.agents.delete(id);
  }

  dropAll(): void {
    for (const id of [...this.agents.keys()]) this.drop(id);
  }
}
