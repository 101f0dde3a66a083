// `npm test`: the whole suite as two jest runs side by side (jest.config.js, KISTE_TEST_GROUP):
// the suites that boot real guests, one file at a time as before (a TCG guest keeps a core busy),
// and the rest (HTTP, databases, browser, units), which needs little more than the other core. On
// this host that is about the guest suites' time instead of the sum of both.
// Arguments go to both runs (`npm test -- --selectProjects sqlite --testPathPatterns lifecycle`);
// a group left without tests by them passes. Each line is prefixed with its group; at the end
// comes each group's result and, for a failed one, its failures again, so that the end of the log
// says what broke. SIGINT/SIGTERM stop both runs. Exit status: 0 only when both passed.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

const GROUPS = ['guests', 'rest'];
const args = process.argv.slice(2);
const jest = new URL('../node_modules/jest/bin/jest.js', import.meta.url).pathname;

const runs = GROUPS.map((group) => {
  const child = spawn(process.execPath, [jest, '--passWithNoTests', ...args], {
    env: { ...process.env, KISTE_TEST_GROUP: group },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const failures = [];
  let summary = '';
  let inFailureSummary = false;
  const onLine = (line) => {
    process.stdout.write(`[${group}] ${line}\n`);
    if (/^Summary of all failing tests/.test(line)) inFailureSummary = true;
    else if (/^Test Suites:/.test(line)) inFailureSummary = false;
    if (inFailureSummary && failures.length < 400) failures.push(line);
    if (/^(Test Suites|Tests|Time):/.test(line)) summary += `  ${line}\n`;
  };
  createInterface({ input: child.stdout }).on('line', onLine);
  createInterface({ input: child.stderr }).on('line', onLine);
  const done = new Promise((resolve) => child.on('close', (code, signal) => resolve({ group, code: code ?? 1, signal, failures, summary: () => summary })));
  return { child, done };
});

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    for (const { child } of runs) child.kill(signal);
  });
}

const started = Date.now();
const results = await Promise.all(runs.map((run) => run.done));
process.stdout.write(`\n==> npm test: both groups done in ${Math.round((Date.now() - started) / 1000)} s\n`);
for (const result of results) {
  const verdict = result.code === 0 ? 'passed' : `FAILED (exit ${result.signal ?? result.code})`;
  process.stdout.write(`${result.group}: ${verdict}\n${result.summary()}`);
  if (result.code !== 0 && result.failures.length > 0) process.stdout.write(`${result.failures.join('\n')}\n`);
}
process.exit(results.every((result) => result.code === 0) ? 0 : 1);
