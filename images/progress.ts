// Progress of an image build on a terminal: one live line (spinner, step, elapsed seconds, latest
// detail) redrawn in place, and a permanent line per finished step. Without a terminal (CI logs,
// pipes) it prints one line when a step starts and one when it ends.
import type { BuildProgress } from './build-image';

const SPINNER = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)}s`;

export interface ProgressView {
  update(progress: BuildProgress): void;
  /** stops redrawing and clears the live line */
  stop(): void;
}

export function createProgressView(stream: NodeJS.WriteStream = process.stderr): ProgressView {
  const tty = !!stream.isTTY && process.env.TERM !== 'dumb';
  let last: BuildProgress | undefined;
  let lastAt = Date.now();
  let frame = 0;
  let timer: NodeJS.Timeout | undefined;

  const width = () => Math.max(40, (stream.columns || 100) - 1);
  const clip = (s: string) => (s.length > width() ? `${s.slice(0, width() - 1)}…` : s);
  const head = (p: BuildProgress) => `[${p.index}/${p.total}] ${p.label}`;

  const draw = () => {
    if (!last) return;
    const stepMs = last.stepElapsedMs + (Date.now() - lastAt);
    // step and seconds always show; the detail gets what room is left
    const line = `${SPINNER[frame++ % SPINNER.length]} ${seconds(stepMs).padStart(6)} ${head(last)}${last.detail ? `  ${last.detail}` : ''}`;
    stream.write(`\r\x1b[2K${clip(line)}`);
  };

  return {
    update(p) {
      last = p;
      lastAt = Date.now();
      if (!tty) {
        if (p.phase === 'start') stream.write(`${head(p)}…${p.detail ? ` ${p.detail}` : ''}\n`);
        if (p.phase === 'end') stream.write(`${head(p)} done in ${seconds(p.stepElapsedMs)}${p.detail ? ` (${p.detail})` : ''}\n`);
        return;
      }
      if (p.phase === 'end') {
        stream.write(`\r\x1b[2K${clip(`✓ ${seconds(p.stepElapsedMs).padStart(6)} ${head(p)}${p.detail ? `  ${p.detail}` : ''}`)}\n`);
        last = undefined;
        return;
      }
      if (!timer) timer = setInterval(draw, 100);
      draw();
    },
    stop() {
      if (timer) clearInterval(timer);
      timer = undefined;
      if (tty && last) stream.write('\r\x1b[2K');
      last = undefined;
    },
  };
}
