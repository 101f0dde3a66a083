// What mmdebstrap is doing, from its --verbose output, as one short line for the build's progress:
// its phase ("I: downloading packages with apt...") and, within a phase, how many packages apt has
// fetched (Get:N lines) and dpkg has unpacked and set up, out of the number apt said it would
// install ("N newly installed"). Without --verbose mmdebstrap draws progress bars only on a
// terminal and says nothing in between its phases: the first build's 12 minutes showed one line.
//
// The output is the tools' text for people, not an interface: a line this does not know changes
// nothing, so a changed wording loses a counter, never the build.

/** mmdebstrap's own phases end in "..." or run a hook; other "I:" lines (the kernel's postinst says "I: /vmlinuz is now a symlink") are notices. */
const PHASE = /^I: (.+?(?:\.\.\.| in shell: .*))$/;
const NOTICE = /^[IWE]: (.+)$/;
const PLANNED = /^\d+ upgraded, (\d+) newly installed/;
/** A package (Get:N URL SUITE/COMPONENT ARCH NAME ARCH VERSION [SIZE]), not an index file of apt-get update. */
const FETCHED = /^Get:\d+ \S+ \S+ \S+ \S+ \S+ \S+ \[/;
const UNPACKED = /^Unpacking /;
const SET_UP = /^Setting up /;

export class MmdebstrapProgress {
  private phase = '';
  /** Packages the latest apt run said it installs; null until one said so. */
  private planned: number | null = null;
  private fetched = 0;
  private unpacked = 0;
  private setUp = 0;

  /** Takes one output line; returns the detail to show now, or null when the line changes nothing. */
  line(text: string): string | null {
    const phase = PHASE.exec(text);
    if (phase) {
      this.phase = phase[1]!.replace(/ in shell: .*/, '').replace(/\.\.\.$/, '');
      this.fetched = this.unpacked = this.setUp = 0;
      return this.detail();
    }
    const notice = NOTICE.exec(text);
    if (notice) return notice[1]!;
    const planned = PLANNED.exec(text);
    if (planned) {
      this.planned = Number(planned[1]);
      return this.detail();
    }
    if (FETCHED.test(text)) this.fetched++;
    else if (UNPACKED.test(text)) this.unpacked++;
    else if (SET_UP.test(text)) this.setUp++;
    else return null;
    return this.detail();
  }

  private detail(): string {
    const of = this.planned === null ? '' : ` of ${this.planned}`;
    const counts = [
      this.fetched > 0 ? `${this.fetched}${of} fetched` : '',
      this.unpacked > 0 ? `${this.unpacked}${of} unpacked` : '',
      this.setUp > 0 ? `${this.setUp}${of} set up` : '',
    ].filter(Boolean);
    return counts.length ? `${this.phase}: packages ${counts.join(', ')}` : this.phase;
  }
}
