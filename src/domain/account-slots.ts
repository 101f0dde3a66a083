// Per-account caps that hold under concurrency. A slot is taken synchronously, before the first
// await of whatever it guards (a desktop stream, a terminal, an image build), and given back once,
// when that ends or fails: twenty requests that arrive together cannot all pass a check that each
// of them made before any of them had counted itself.

export interface Slot {
  /** Gives the slot back; later calls do nothing. */
  release(): void;
}

export class AccountSlots {
  private readonly held = new Map<string, number>();

  constructor(readonly perAccount: number) {}

  /** A slot of the account's; throws `refusal()` while it holds perAccount already. */
  take(accountId: string, refusal: () => Error): Slot {
    if (this.count(accountId) >= this.perAccount) throw refusal();
    return this.hold(accountId);
  }

  /** A slot whatever the account holds (work admitted earlier, resumed after a restart). */
  hold(accountId: string): Slot {
    this.held.set(accountId, this.count(accountId) + 1);
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        const left = this.count(accountId) - 1;
        if (left > 0) this.held.set(accountId, left);
        else this.held.delete(accountId);
      },
    };
  }

  count(accountId: string): number {
    return this.held.get(accountId) ?? 0;
  }
}
