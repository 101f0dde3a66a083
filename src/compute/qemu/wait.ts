// Small waiting helpers: QEMU and the kernel tell us about most state changes only when asked
// (process exit of a non-child, a file appearing), so the driver polls at short intervals.

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `check` until it returns a value other than undefined, or the deadline passes (undefined). */
export async function pollUntil<T>(check: () => T | undefined | Promise<T | undefined>, timeoutMs: number, intervalMs = 20): Promise<T | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() >= deadline) return undefined;
    await sleep(Math.min(intervalMs, Math.max(1, deadline - Date.now())));
  }
}
