// A spinner on stderr while the service works (only on a terminal, and never with --json), so that
// scripts reading stdout or logs see nothing but the answer. The work may change its label as it
// goes (create shows the service's image build step while it waits for it).
const FRAMES = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

export type Relabel = (label: string) => void;

export async function withSpinner<T>(label: string, enabled: boolean, work: (relabel: Relabel) => Promise<T>): Promise<T> {
  let current = label;
  const relabel: Relabel = (next) => (current = next);
  if (!enabled || !process.stderr.isTTY) return work(relabel);
  const started = Date.now();
  let frame = 0;
  const draw = () => {
    const line = `${FRAMES[frame++ % FRAMES.length]} ${current} (${Math.round((Date.now() - started) / 1000)} s)`;
    // One screen line: a wrapped one could not be redrawn with \r.
    process.stderr.write(`\r\x1b[2K${line.slice(0, (process.stderr.columns || 80) - 1)}`);
  };
  draw();
  const timer = setInterval(draw, 100);
  try {
    return await work(relabel);
  } finally {
    clearInterval(timer);
    process.stderr.write('\r\x1b[2K');
  }
}

/** A line on stderr above the spinner (which redraws itself below it): a build step, a notice. */
export function note(line: string): void {
  process.stderr.write(`${process.stderr.isTTY ? '\r\x1b[2K' : ''}${line}\n`);
}
