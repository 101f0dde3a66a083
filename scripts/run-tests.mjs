// `npm test`: the whole suite as jest runs in two lanes side by side (jest.config.js,
// KISTE_TEST_GROUP). Lane one runs the suites that boot real guests, one file at a time (a TCG
// guest keeps a core busy); lane two runs the rest (HTTP, databases, browser, units), which needs
// little more than the other core, and then the few guest suites of guests-b, so that both lanes
// end at about the same time. On this host that is well under the sum of all.
// Arguments go to every run (`npm test -- --selectProjects sqlite --testPathPatterns lifecycle`);
// a group left without tests by them passes. Each line is prefixed with its group; at the end
// comes each group's result and, for a failed one, its failures again, so that the end of the log
// says what broke. SIGINT/SIGTERM stop every run. Exit status: 0 only when every group passed.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

const LANES = [['guests-a'], ['rest', 'guests-b']];
const args = process.argv.slice(2);
const jest = new URL('../node_modules/jest/bin/jest.js', import.meta.url).pathname;
const running = new Set();
let stopping = null;

function runGroup(group) {
  const child = spawn(process.execPath, [jest, '--passWithNoTests', ...args], {
    env: { ...process.env, KISTE_TEST_GROUP: group },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(child);
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
  return new Promise((resolve) => child.on('close', (code, signal) => {
    running.delete(child);
    resolve({ group, code: code ?? 1, signal, failures, summary });
  }));
}

async function runLane(groups) {
  const results = [];
  for (const group of groups) {
    if (stopping) break;
    results.push(await runGroup(group));
  }
  return results;
}

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    stopping = signal;
    for (const child of running) child.kill(signal);
  });
}

const started = Date.now();
const results = (await Promise.all(LANES.map(runLane))).flat();
process.stdout.write(`\n==> npm test: every group done in ${Math.round((Date.now() - started) / 1000)} s\n`);
for (const result of results) {
  const verdict = result.code === 0 ? 'passed' : `FAILED (exit ${result.signal ?? result.code})`;
  process.stdout.write(`${result.group}: ${verdict}\n${result.summary}`);
  if (result.code !== 0 && result.failures.length > 0) process.stdout.write(`${result.failures.join('\n')}\n`);
}
process.exit(results.every((result) => result.code === 0) ? 0 : 1);
