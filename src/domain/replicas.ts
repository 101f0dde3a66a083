// The control-plane replicas as the domain sees them: which one this is, and whether the replica that
// claimed an operation still runs (then it is that replica's to finish). Implemented over the
// database in src/db/replica-presence.ts.
export interface LiveReplicas {
  /** This replica's id (new at every start): what its claims write as the operation's owner. */
  readonly me: string;
  /** Whether the replica `owner` still runs (this one always does); unsure counts as alive, so nothing is done twice. */
  isAlive(owner: string): Promise<boolean>;
}
