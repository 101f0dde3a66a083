// Applying an environment version to a new instance, through its guest agent. Secret files (0600)
// and the variables (/etc/profile.d, for login shells; every exec gets them from the service) are
// written before the create answers; the repositories are cloned and the setup script runs in the
// background: setup_status pending → running → succeeded | failed, an event marks the end, and
// GET /v1/instances/{name}/setup has each step's timing and the output (last 64 KiB).
// Secret contents travel only in the agent's exec environment: never in argv, logs or records.
import type { GuestAgent } from '../compute/guest-agent';
import { shellQuote, shellWord } from '../shell-quote';
import { appendEvent } from '../store/events';
import type { InstanceSetupStore } from '../store/instance-setups';
import type { Instance, InstanceStore } from '../store/instances';
import type { Clock } from './clock';
import { OutputTail } from './output-tail';
import type { Repository } from './environment-rules';
import type { AppliedEnvironment } from './environments';
import type { Transactions } from './transactions';

export const VARIABLES_FILE = '/etc/profile.d/kiste-environment.sh';
export const SETUP_SCRIPT_FILE = '/var/lib/kiste/setup.sh';
const OUTPUT_KEPT_BYTES = 64 * 1024;
const ERROR_TAIL_BYTES = 2048;
const CLONE_TIMEOUT_MS = 15 * 60_000;
const SETUP_TIMEOUT_MS = 30 * 60_000;
const SAVE_EVERY_MS = 2000;

/**
 * Writes files 0..$KISTE_FILES-1 given as $KISTE_FILE_<n>_PATH, _MODE and _CONTENT (base64), each
 * atomically; under /home/<user>/ the user owns it. One command for all: each exec costs a round trip.
 * Few processes per file, too (each costs tens of milliseconds under TCG, and the create waits for
 * this): paths are absolute and checked (no spaces, no `..`), so parameter expansion does what
 * dirname and cut would.
 */
const WRITE_FILES = [
  'set -eu',
  'umask 077',
  'n=0',
  'while [ "$n" -lt "$KISTE_FILES" ]; do',
  '  eval "path=\\$KISTE_FILE_${n}_PATH mode=\\$KISTE_FILE_${n}_MODE content=\\$KISTE_FILE_${n}_CONTENT"',
  '  parent=${path%/*}; parent=${parent:-/}',
  '  dir=$parent; missing=""',
  '  while [ ! -d "$dir" ]; do missing="$dir $missing"; dir=${dir%/*}; dir=${dir:-/}; done',
  '  [ -z "$missing" ] || mkdir -p -- "$parent"',
  // Folders made here under a home, and the file, belong to the home's user.
  '  owner=""',
  '  case "$path" in /home/*/*) rest=${path#/home/}; home="/home/${rest%%/*}"; owner=$(stat -c %u:%g -- "$home")',
  '    for d in $missing; do case "$d" in "$home"/*) chown -- "$owner" "$d"; chmod 0700 "$d" ;; esac; done ;; esac',
  '  tmp="$path.kiste-tmp"',
  '  if [ -e "$tmp" ] || [ -L "$tmp" ]; then rm -f -- "$tmp"; fi',
  '  printf %s "$content" | base64 -d > "$tmp"',
  '  [ "$mode" = 0600 ] || chmod "$mode" -- "$tmp"', // umask 077 made it 0600
  '  [ -z "$owner" ] || chown -- "$owner" "$tmp"',
  '  mv -f -- "$tmp" "$path"',
  '  n=$((n + 1))',
  'done',
].join('\n');

type StepName = 'files' | 'clone' | 'setup_script';
type StepStatus = 'pending' | 'running' | 'succeeded' | 'failed';

interface Step {
  name: StepName;
  status: StepStatus;
  started_at: string | null;
  finished_at: string | null;
  duration_ms: number | null;
  detail: string | null;
}

class StepFailed extends Error {}

export interface SetupLogger {
  warn(object: object, message: string): void;
}

export class EnvironmentSetup {
  constructor(
    private readonly transactions: Transactions,
    private readonly stores: { instances: InstanceStore; setups: InstanceSetupStore },
    private readonly agentOf: (instanceId: string) => GuestAgent,
    private readonly clock: Clock,
    private readonly logger: SetupLogger,
  ) {}

  /**
   * Writes the files now (the create answers after this) and leaves the clones and the setup script
   * running in the background. Never throws: what fails is the instance's setup_status.
   */
  async apply(instance: Instance, environment: AppliedEnvironment): Promise<void> {
    const run = new SetupRun(instance, environment, this.clock);
    const agent = this.agentOf(instance.id);
    try {
      await run.step('files', null, () => this.writeFiles(agent, environment));
    } catch (error) {
      await this.finish(run, error);
      return;
    }
    if (!run.hasBackgroundWork()) {
      await this.finish(run, null);
      return;
    }
    await this.save(run, 'running');
    void this.background(run, agent).catch((error: Error) => this.logger.warn({ err: error, instance: instance.id }, 'environment setup stopped'));
  }

  /** A machine that never started runs no setup: its setup fails at once instead of staying pending. */
  async notStarted(instance: Instance, environment: AppliedEnvironment): Promise<void> {
    await this.finish(new SetupRun(instance, environment, this.clock), new StepFailed('the machine did not start'));
  }

  private async background(run: SetupRun, agent: GuestAgent): Promise<void> {
    const { content } = run.environment;
    const env = { ...content.variables, GIT_TERMINAL_PROMPT: '0' };
    let failure: unknown = null;
    try {
      for (const repo of content.repositories) {
        await run.step('clone', `${repo.url} → ${repo.path}`, () => this.clone(agent, run, repo, env));
      }
      if (content.setupScript.trim() !== '') {
        await run.step('setup_script', null, () => this.setupScript(agent, run, env));
      }
    } catch (error) {
      failure = error;
    }
    await this.finish(run, failure);
  }

  private async writeFiles(agent: GuestAgent, environment: AppliedEnvironment): Promise<void> {
    const { content } = environment;
    const header = `# Written by kiste: variables of environment ${environment.name} version ${environment.version}.\n`;
    const lines = Object.entries(content.variables).map(([name, value]) => `export ${name}=${shellQuote(value)}\n`);
    await writeGuestFiles(agent, [
      ...content.secretFiles.map((file) => ({ path: file.path, content: file.content, mode: '0600' })),
      { path: VARIABLES_FILE, content: Buffer.from(header + lines.join('')), mode: '0644' },
      ...(content.setupScript.trim() !== '' ? [{ path: SETUP_SCRIPT_FILE, content: Buffer.from(content.setupScript), mode: '0700' }] : []),
    ]);
  }

  private async clone(agent: GuestAgent, run: SetupRun, repo: Repository, variables: Record<string, string>): Promise<void> {
    const config = ['-c', 'protocol.file.allow=never', '-c', 'protocol.ext.allow=never'];
    const env: Record<string, string> = { ...variables };
    const isHttp = /^https?:\/\//.test(repo.url);
    if (repo.credentials_file && isHttp) config.push('-c', 'credential.helper=', '-c', `credential.helper=store --file=${repo.credentials_file}`);
    if (!isHttp) {
      // Host keys are learnt on first use; the key file (validated: plain path characters) is the only identity offered.
      const identity = repo.credentials_file ? ` -i ${shellQuote(repo.credentials_file)} -o IdentitiesOnly=yes` : '';
      env.GIT_SSH_COMMAND = `ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new${identity}`;
    }
    await this.runStreaming(agent, run, ['git', ...config, 'clone', '--', repo.url, repo.path], env, CLONE_TIMEOUT_MS, null);
    if (repo.ref) await this.runStreaming(agent, run, ['git', '-C', repo.path, 'checkout', '--quiet', repo.ref, '--'], env, CLONE_TIMEOUT_MS, null);
  }

  private async setupScript(agent: GuestAgent, run: SetupRun, env: Record<string, string>): Promise<void> {
    const cwd = run.environment.content.repositories[0]?.path ?? null;
    await this.runStreaming(agent, run, ['/bin/bash', '-l', SETUP_SCRIPT_FILE], env, SETUP_TIMEOUT_MS, cwd);
  }

  /** Runs a command in the guest with its output appended to the run's; throws StepFailed unless it exits 0. */
  private async runStreaming(agent: GuestAgent, run: SetupRun, argv: string[], env: Record<string, string>, timeoutMs: number, cwd: string | null): Promise<void> {
    run.append(`$ ${argv.map(shellWord).join(' ')}\n`);
    const handle = await agent.exec({ argv, env, cwd, timeout_ms: timeoutMs });
    let lastSave = Date.now();
    for await (const chunk of handle) {
      run.append(chunk.data.toString('utf8'));
      if (Date.now() - lastSave > SAVE_EVERY_MS) {
        lastSave = Date.now();
        await this.save(run, 'running');
      }
    }
    const exit = await handle.exit;
    if (exit.status !== 'exited' || exit.exit_code !== 0) {
      const why = exit.status === 'timed_out' ? `timed out after ${timeoutMs / 1000} s` : exit.status === 'exited' ? `exit code ${exit.exit_code}` : exit.status;
      run.failCurrent(why);
      throw new StepFailed(`${argv[0] === 'git' ? 'git' : 'the setup script'} failed (${why})`);
    }
  }

  private async finish(run: SetupRun, failure: unknown): Promise<void> {
    if (failure !== null && !(failure instanceof StepFailed)) this.logger.warn({ err: failure, instance: run.instance.id }, 'environment setup failed');
    await this.save(run, failure === null ? 'succeeded' : 'failed', failure === null ? null : run.reason(failure));
  }

  /**
   * Records the run; never throws (a database that fails here leaves the setup to the next start's
   * check). The instance's setup_error has the reason and the output's tail; the event (which webhooks
   * carry) only the reason.
   */
  private async save(run: SetupRun, status: 'running' | 'succeeded' | 'failed', reason: string | null = null): Promise<void> {
    const { instance } = run;
    try {
      await this.stores.setups.save(instance.accountId, instance.id, run.record());
      if (status === 'running') {
        await this.stores.instances.markSetupRunning(instance.id);
        return;
      }
      await this.transactions.run(async (tx) => {
        const current = await this.stores.instances.findById(instance.id, tx);
        if (!current) return; // deleted meanwhile: nothing to mark
        await this.stores.instances.update(instance.id, { setupStatus: status, setupError: reason === null ? null : run.withOutputTail(reason) }, tx);
        await appendEvent(tx, instance.accountId, {
          type: 'instance.setup_completed', resourceType: 'instance', resourceId: instance.id,
          data: { name: current.name, status, error: reason, environment_version_id: run.environment.versionId },
        });
      });
    } catch (error) {
      this.logger.warn({ err: error, instance: instance.id }, 'setup progress could not be recorded');
    }
  }
}

/** One application's steps and output, as the setup endpoint shows them. */
class SetupRun {
  private readonly steps: Step[] = [];
  private readonly output = new OutputTail(OUTPUT_KEPT_BYTES);

  constructor(readonly instance: Instance, readonly environment: AppliedEnvironment, private readonly clock: Clock) {}

  hasBackgroundWork(): boolean {
    return this.environment.content.repositories.length > 0 || this.environment.content.setupScript.trim() !== '';
  }

  async step(name: StepName, detail: string | null, work: () => Promise<void>): Promise<void> {
    const started = this.clock.now();
    const step: Step = { name, status: 'running', started_at: started.toISOString(), finished_at: null, duration_ms: null, detail };
    this.steps.push(step);
    try {
      await work();
      step.status = 'succeeded';
    } catch (error) {
      step.status = 'failed';
      throw error;
    } finally {
      const finished = this.clock.now();
      step.finished_at = finished.toISOString();
      step.duration_ms = finished.getTime() - started.getTime();
    }
  }

  append(text: string): void {
    this.output.append(text);
  }

  reason(failure: unknown): string {
    return failure instanceof StepFailed ? failure.message : `the machine did not answer (${failure instanceof Error ? failure.message : String(failure)})`;
  }

  withOutputTail(reason: string): string {
    const tail = this.output.end(ERROR_TAIL_BYTES);
    return tail ? `${reason}; output ends:\n${tail}` : reason;
  }

  /** The running step failed with `detail` (e.g. its exit status). */
  failCurrent(detail: string): void {
    const step = this.steps[this.steps.length - 1];
    if (step) step.detail = step.detail ? `${step.detail}; ${detail}` : detail;
  }

  record() {
    return { steps: this.steps.map((s) => ({ ...s })), output: this.output.text, outputTruncated: this.output.truncated };
  }
}

/** Writes the files in one agent command (WRITE_FILES); their contents travel only in its environment. */
export async function writeGuestFiles(agent: GuestAgent, files: { path: string; content: Buffer; mode: string }[]): Promise<void> {
  const env: Record<string, string> = { KISTE_FILES: String(files.length) };
  files.forEach((file, n) => {
    env[`KISTE_FILE_${n}_PATH`] = file.path;
    env[`KISTE_FILE_${n}_MODE`] = file.mode;
    env[`KISTE_FILE_${n}_CONTENT`] = file.content.toString('base64');
  });
  const result = await agent.run({ argv: ['/bin/sh', '-c', WRITE_FILES], env, timeout_ms: 60_000 });
  if (result.status !== 'exited' || result.exit_code !== 0) {
    throw new StepFailed(`writing the environment's files failed: ${result.stderr.toString('utf8').trim().slice(-500) || result.status}`);
  }
}
