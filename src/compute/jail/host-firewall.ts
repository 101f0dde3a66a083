// Loads the machines' egress rules (egress-rules.ts) into the host's nftables and reads them back;
// egress-watch.ts keeps them there.
import { runTool } from './run-tool';
import { egressRuleset, type EgressSettings } from './egress-rules';

export class HostFirewall {
  private readonly ruleset: string;

  constructor(private readonly settings: EgressSettings) {
    this.ruleset = egressRuleset(settings);
  }

  get table(): string {
    return this.settings.table;
  }

  /** Replaces the table with the rules of these settings (one nftables transaction). */
  load(): Promise<void> {
    return nft(['-f', '-'], this.ruleset).then(() => undefined);
  }

  /**
   * The table as nftables holds it now, in a form two readings can be compared in: the stateless
   * listing (rules, sets and their elements, hooks, flags; no counters, no handles) with its white
   * space collapsed. Null when the table does not exist; rejects when nft cannot be asked.
   */
  async listing(): Promise<string | null> {
    try {
      return (await nft(['-s', 'list', 'table', 'inet', this.settings.table])).replace(/\s+/g, ' ').trim();
    } catch (error) {
      if (/No such file or directory/.test((error as Error).message)) return null;
      throw error;
    }
  }

  /** Removes the table (tests tearing down an installation). */
  unload(): Promise<void> {
    return nft(['delete', 'table', 'inet', this.settings.table]).then(() => undefined, () => undefined);
  }
}

function nft(args: string[], input?: string): Promise<string> {
  return runTool('nft', args, input);
}
