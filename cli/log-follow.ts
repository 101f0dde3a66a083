// `kiste logs -f`: the logs endpoint answers the console's last lines, so following it means asking
// again and printing only what came after the text already printed.

/** The window every poll asks for (the endpoint's largest tail). */
export const FOLLOW_WINDOW_LINES = 2000;

/** The last `count` lines of text (each with its newline). */
export function lastLines(text: string, count: number): string {
  const lines = text.split(/(?<=\n)/);
  return lines.slice(Math.max(0, lines.length - count)).join('');
}

/** The part of `current` that follows what `previous` ended with (all of it when they do not overlap). */
export function newLogText(previous: string, current: string): string {
  if (!previous) return current;
  if (current.startsWith(previous)) return current.slice(previous.length);
  // The window moved: find where the end of what was printed sits in the new tail.
  for (let keep = Math.min(previous.length, current.length); keep > 0; keep--) {
    const end = previous.slice(previous.length - keep);
    // Only whole lines count as an anchor, so a repeated short fragment does not fool it.
    if ((keep === previous.length || previous[previous.length - keep - 1] === '\n') && current.startsWith(end)) return current.slice(keep);
  }
  for (let cut = previous.lastIndexOf('\n', previous.length - 2); cut >= 0; cut = previous.lastIndexOf('\n', cut - 1)) {
    const tail = previous.slice(cut + 1);
    const at = current.indexOf(tail);
    if (tail.length > 0 && at >= 0) return current.slice(at + tail.length);
  }
  return current;
}
