// A spinner on stderr while the service works (only on a terminal, and never with --json), so that
// scripts reading stdout or logs see nothing but the answer.
const FRAMES = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

export async function withSpinner<T>(label: string, enabled: boolean, work: () => Promise<T>): Promise<T> {
  if (!enabled || !process.stderr.isTTY) return work();
  const started = Date.now();
  let frame = 0;
  const draw = () => process.stderr.write(`\r${FRAMES[frame++ % FRAMES.length]} ${label} (${Math.round((Date.now() - started) / 1000)} s)`);
  draw();
  const timer = setInterval(draw, 100);
  try {
    return await work();
  } finally {
    clearInterval(timer);
    process.stderr.write('\r\x1b[2K');
  }
}
