// Loads the machines' egress rules (egress-rules.ts) into the host's nftables, and puts them back
// when something removed them (another tool flushing the ruleset) before a machine starts.
import { runTool } from './run-tool';
import { egressRuleset, type EgressSettings } from './egress-rules';

export class HostFirewall {
  private readonly ruleset: string;

  constructor(private readonly settings: EgressSettings) {
    this.ruleset = egressRuleset(settings);
  }

  /** Replaces the table with the rules of these settings (one nftables transaction). */
  load(): Promise<void> {
    return nft(['-f', '-'], this.ruleset).then(() => undefined);
  }

  /** True when the table is loaded (it is ours: nothing else writes it). */
  async loaded(): Promise<boolean> {
    return nft(['list', 'table', 'inet', this.settings.table]).then(
      () => true,
      () => false,
    );
  }

  /** Removes the table (tests tearing down an installation). */
  unload(): Promise<void> {
    return nft(['delete', 'table', 'inet', this.settings.table]).then(() => undefined, () => undefined);
  }

  /** Loads the rules unless they are there; true when they had to be loaded again. */
  async ensure(): Promise<boolean> {
    if (await this.loaded()) return false;
    await this.load();
    return true;
  }
}

function nft(args: string[], input?: string): Promise<string> {
  return runTool('nft', args, input);
}
