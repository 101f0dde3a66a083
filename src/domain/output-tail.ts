// The last part of a long output (a setup's clones and script, a layer build's log): kept up to a
// bound, with whether earlier output was dropped.
export class OutputTail {
  private kept = '';
  private dropped = false;

  constructor(private readonly maxBytes: number) {}

  append(text: string): void {
    this.kept += text;
    if (Buffer.byteLength(this.kept) > this.maxBytes) {
      this.kept = this.kept.slice(-this.maxBytes);
      this.dropped = true;
    }
  }

  get text(): string {
    return this.kept;
  }

  /** Earlier output was dropped. */
  get truncated(): boolean {
    return this.dropped;
  }

  /** Its last `bytes` characters, trimmed (for an error message). */
  end(bytes: number): string {
    return this.kept.slice(-bytes).trim();
  }
}
