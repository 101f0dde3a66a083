// Administration commands, run on the machine that hosts kiste:   npm run admin -- <command> [options]
//
// Uses the server's own configuration (KISTE_* variables, see README.md) and domain services, so it
// works on the embedded SQLite database and on PostgreSQL alike, and it may run while the service
// runs. Results go to stdout, progress and errors to stderr, so `KEY=$(npm run -s admin -- mint-key
// --email you@example.com)` captures only the key. Passwords are never taken from the command line
// (it would land in shell history and in `ps`): KISTE_ADMIN_PASSWORD, else the first line of stdin.
import { parseArgs } from 'node:util';
import { ConfigError, loadConfig, type Config } from '../src/config';
import { openDatabase, type Database } from '../src/db/database';
import { MIN_PASSWORD_LENGTH } from '../src/domain/accounts';
import { KisteError } from '../src/errors';
import { createServices, type Services } from '../src/services';
import { WorkerAdminError } from '../src/domain/workers';
import { offerOf } from '../src/store/workers';
import { joinReplicas, type ReplicaPresence } from '../src/db/replica-presence';

const USAGE = `usage: npm run admin -- <command> [options]

commands:
  create-account --email E [--name N]
      Creates an account. The password is read from KISTE_ADMIN_PASSWORD or, when that is
      unset, from the first line of stdin (at least ${MIN_PASSWORD_LENGTH} characters).
  mint-key --email E [--label L] [--days D]
      Creates an API key for the account and prints only the key on stdout.
      --days: lifetime in days, 1 to 365 (default 30). --label: default "admin-cli".
  list-accounts
      Lists every account: id, e-mail, name, created, state.

several hosts (KISTE_COMPUTE=workers; PostgreSQL when there is more than one control plane):
  worker-add --name N --address https://HOST:PORT [--vcpus V] [--memory-mib M] [--disk-mib D]
      Registers a worker and prints its join token on stdout, once: start kiste-worker on that
      host with KISTE_WORKER_JOIN_TOKEN=<token> and KISTE_WORKER_LISTEN=<addr:port>. The sizes are
      a ceiling on what placement gives it, whatever the worker says it offers.
  workers
      Lists the workers: name, address, state, whether it answers, what it offers, its machines.
  worker-drain --name N [--move] | worker-activate --name N
      A draining worker takes no new machines; its machines run on. Activate takes it back.
      --move: also moves every machine off it to the other workers, one at a time: a running
      machine is stopped with its memory saved, moved, and resumed where it was.
  worker-lost --name N
      The worker's host is gone for good (it must not have answered for 30 s): nothing is placed
      on it again, and each of its machines ends in the error state (an event and an alert to its
      owner), to be deleted. Should the host answer again after all, it is adopted anew: it removes
      the machines deleted meanwhile and runs the others again. worker-activate takes it back.
  worker-remove --name N
      Forgets a drained or lost worker no machine lives on.
  worker-repin --name N
      After the worker's TLS certificate was renewed: the next contact pins the one it presents
      (the worker's signed hello must name it).
  machines
      Lists every machine and the worker it lives on.

The database is the server's: KISTE_DATABASE_URL, else SQLite in KISTE_DATA_DIR (default ./data).
Exit status: 0 done, 1 refused (unknown account, address taken, limit reached), 2 bad usage.
`;

/** Wrong usage or input: exit status 2. */
class UsageError extends Error {
  constructor(message: string, readonly showUsage = false) {
    super(message);
  }
}
/** A refusal the operator can act on: exit status 1, message only. */
class AdminError extends Error {}

const EMAIL = /^[^\s@]+@[^\s@]+$/;
const MAX_DAYS = 365;
const DAY_SECONDS = 24 * 3600;

function say(message: string): void {
  process.stderr.write(`kiste admin: ${message}\n`);
}

interface Parsed {
  command: string;
  email?: string;
  name?: string;
  label?: string;
  days?: string;
  address?: string;
  vcpus?: string;
  'memory-mib'?: string;
  'disk-mib'?: string;
  move?: boolean;
}

const OPTIONS_OF: Record<string, readonly string[]> = {
  'create-account': ['email', 'name'],
  'mint-key': ['email', 'label', 'days'],
  'list-accounts': [],
  'worker-add': ['name', 'address', 'vcpus', 'memory-mib', 'disk-mib'],
  workers: [],
  'worker-drain': ['name', 'move'],
  'worker-activate': ['name'],
  'worker-remove': ['name'],
  'worker-lost': ['name'],
  'worker-repin': ['name'],
  machines: [],
};

function parse(argv: string[]): Parsed | 'help' {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        email: { type: 'string' },
        name: { type: 'string' },
        label: { type: 'string' },
        days: { type: 'string' },
        address: { type: 'string' },
        vcpus: { type: 'string' },
        'memory-mib': { type: 'string' },
        'disk-mib': { type: 'string' },
        move: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  const { values, positionals } = parsed;
  if (values.help || positionals[0] === 'help') return 'help';
  if (positionals.length === 0) throw new UsageError('no command given', true);
  if (positionals.length > 1) throw new UsageError(`unexpected argument '${positionals[1]}'`);
  const command = positionals[0]!;
  const allowed = Object.hasOwn(OPTIONS_OF, command) ? OPTIONS_OF[command] : undefined;
  if (!allowed) throw new UsageError(`unknown command '${command}'`, true);
  for (const option of Object.keys(values)) {
    if (!allowed.includes(option)) throw new UsageError(`${command} takes no --${option}`);
  }
  return { command, ...values };
}

function requireEmail(parsed: Parsed): string {
  if (parsed.email === undefined) throw new UsageError(`${parsed.command} needs --email`);
  const email = parsed.email.trim().toLowerCase();
  if (!EMAIL.test(email)) throw new UsageError(`not an e-mail address: '${parsed.email}'`);
  return email;
}

function parseDays(value: string | undefined): number {
  if (value === undefined) return 30;
  const days = /^\d+$/.test(value) ? Number(value) : NaN;
  if (!Number.isInteger(days) || days < 1 || days > MAX_DAYS) {
    throw new UsageError(`--days must be a whole number from 1 to ${MAX_DAYS}, got '${value}'`);
  }
  return days;
}

/** Reads one line from stdin; on a terminal the typed characters are not echoed. */
async function readPasswordFromStdin(): Promise<string> {
  const stdin = process.stdin;
  if (stdin.isTTY) {
    process.stderr.write('Password for the new account: ');
    stdin.setRawMode(true);
  }
  stdin.setEncoding('utf8');
  return new Promise<string>((resolve, reject) => {
    let buffered = '';
    const finish = (error: Error | null, line?: string) => {
      stdin.off('data', onData);
      stdin.off('end', onEnd);
      stdin.off('error', onError);
      if (stdin.isTTY) {
        stdin.setRawMode(false);
        process.stderr.write('\n');
      }
      stdin.pause();
      if (error) reject(error);
      else resolve(line!);
    };
    const onData = (chunk: string) => {
      if (stdin.isTTY && chunk.includes('\u0003')) return finish(new AdminError('cancelled'));
      buffered += chunk;
      const end = buffered.search(/[\r\n]/);
      if (end >= 0) finish(null, buffered.slice(0, end));
    };
    const onEnd = () => finish(null, buffered);
    const onError = (error: Error) => finish(error);
    stdin.on('data', onData);
    stdin.on('end', onEnd);
    stdin.on('error', onError);
    stdin.resume();
  });
}

async function withServices<T>(config: Config, work: (services: Services) => Promise<T>): Promise<T> {
  const where = config.databaseUrl ? redactUrl(config.databaseUrl) : `SQLite in ${config.dataDir}`;
  say(`opening the database (${where})`);
  const database: Database = await openDatabase({ url: config.databaseUrl, dataDir: config.dataDir });
  // Operations this process claims (a drain's) name it, as a replica's do: the service's reconciler leaves them to it while it runs.
  let replicas: ReplicaPresence | undefined;
  try {
    replicas = await joinReplicas(database.provider === 'postgresql' ? config.databaseUrl : undefined);
    return await work(createServices(config, database, { replicas }));
  } finally {
    await replicas?.close();
    await database.close();
  }
}

/** The database URL without its password, for progress messages. */
function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return url.split(':')[0] + ':…';
  }
}

async function createAccount(config: Config, parsed: Parsed): Promise<void> {
  const email = requireEmail(parsed);
  const name = parsed.name?.trim() || null;
  let password = process.env.KISTE_ADMIN_PASSWORD;
  if (password) {
    say('password taken from KISTE_ADMIN_PASSWORD');
  } else {
    if (!process.stdin.isTTY) say('reading the password from the first line of stdin');
    password = await readPasswordFromStdin();
  }
  if (password.length < MIN_PASSWORD_LENGTH) {
    throw new UsageError(`the password must have at least ${MIN_PASSWORD_LENGTH} characters (got ${password.length})`);
  }
  await withServices(config, async (services) => {
    if (await services.accounts.findByEmail(email)) throw new AdminError(`an account with the e-mail address ${email} already exists`);
    say(`creating the account ${email}`);
    const account = await services.accounts.create(email, password!, name);
    process.stdout.write(`${account.id}\n`);
    say(`created account ${account.email} (id ${account.id})`);
  });
}

async function mintKey(config: Config, parsed: Parsed): Promise<void> {
  const email = requireEmail(parsed);
  const days = parseDays(parsed.days);
  const label = parsed.label ?? 'admin-cli';
  if (label.trim().length === 0 || label.length > 100) throw new UsageError('--label must have 1 to 100 characters');
  await withServices(config, async (services) => {
    const account = await services.accounts.findByEmail(email);
    if (!account) throw new AdminError(`no account with the e-mail address ${email} (see: npm run admin -- list-accounts)`);
    if (account.deletionRequestedAt) throw new AdminError(`the account ${email} is being deleted; its API keys would not work`);
    say(`minting an API key for ${account.email}, label "${label}", valid ${days} day${days === 1 ? '' : 's'}`);
    const { token, record } = await services.apiTokens.create(account.id, label, days * DAY_SECONDS);
    process.stdout.write(`${token}\n`);
    say(`minted API key ${record.tokenHint} (id ${record.id}), expires ${record.expiresAt.toISOString()}`);
  });
}

async function listAccounts(config: Config): Promise<void> {
  await withServices(config, async (services) => {
    // No store offers "every account" (the API never needs it), so this reads the table directly.
    const accounts = await services.database.prisma.account.findMany({ orderBy: [{ createdAt: 'asc' }, { email: 'asc' }] });
    const rows = accounts.map((account) => [
      account.id,
      account.email,
      account.name ?? '-',
      account.createdAt.toISOString(),
      account.deletionRequestedAt ? 'deleting' : account.signInLockedAt ? 'sign-in locked' : 'active',
    ]);
    const header = ['ID', 'EMAIL', 'NAME', 'CREATED', 'STATE'];
    const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column]!.length)));
    const line = (cells: string[]) => cells.map((cell, column) => cell.padEnd(widths[column]!)).join('  ').trimEnd();
    process.stdout.write([line(header), ...rows.map(line)].join('\n') + '\n');
    say(`${accounts.length} account${accounts.length === 1 ? '' : 's'}`);
  });
}

function printTable(header: string[], rows: string[][]): void {
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column]!.length)));
  const line = (cells: string[]) => cells.map((cell, column) => cell.padEnd(widths[column]!)).join('  ').trimEnd();
  process.stdout.write([line(header), ...rows.map(line)].join('\n') + '\n');
}

/** A size option: a whole number up to what a database column holds; undefined when not given. */
function size(parsed: Parsed, option: 'vcpus' | 'memory-mib' | 'disk-mib'): number | undefined {
  const value = parsed[option];
  if (value === undefined) return undefined;
  if (!/^\d{1,10}$/.test(value) || Number(value) > 2 ** 31 - 1) throw new UsageError(`--${option} must be a whole number, got '${value}'`);
  return Number(value);
}

function requireName(parsed: Parsed): string {
  if (!parsed.name) throw new UsageError(`${parsed.command} needs --name`);
  return parsed.name;
}

/**
 * Moves every machine off a drained worker, one at a time: a running one is stopped with its memory
 * saved, moved and resumed where it was. Needs the workers: this process reaches them as a
 * control-plane replica would (and names itself as its operations' owner).
 */
async function moveAllOff(config: Config, services: Services, workerId: string): Promise<void> {
  if (config.compute !== 'workers') throw new AdminError('machines move between registered workers only (KISTE_COMPUTE=workers)');
  if (!(await services.compute.start(config.imageProfile))) throw new AdminError('no worker answers now');
  try {
    const machines = await services.database.prisma.instance.findMany({ where: { workerId }, orderBy: { name: 'asc' } });
    for (const machine of machines) {
      const wasRunning = machine.desiredState === 'running';
      if (wasRunning) {
        say(`${machine.name}: saving its memory and stopping it`);
        await services.instances.stop(machine.accountId, machine.name, true);
        await settled(services, machine.id, 'stopped');
      }
      say(`${machine.name}: moving it`);
      let moveError: unknown = null;
      await services.moves.moveStopped(await services.database.prisma.instance.findUniqueOrThrow({ where: { id: machine.id } })).catch((error: unknown) => (moveError = error));
      if (wasRunning) {
        // Where it is now: moved, or (the move failed) still on this worker, as it was.
        say(`${machine.name}: resuming it`);
        await services.instances.resume(machine.accountId, machine.name);
        await settled(services, machine.id, 'running');
      }
      if (moveError) throw moveError;
      process.stdout.write(`${machine.name}\n`);
    }
    say(`${machines.length} machine${machines.length === 1 ? '' : 's'} moved`);
  } finally {
    await services.compute.stop();
  }
}

/** Waits for a machine's operation to end in `status` (an error state is a refusal). */
async function settled(services: Services, id: string, status: string): Promise<void> {
  for (;;) {
    const row = await services.database.prisma.instance.findUniqueOrThrow({ where: { id } });
    if (row.operation === null && row.status === status) return;
    if (row.operation === null && row.status === 'error') throw new AdminError(`${row.name} ended in the error state: ${row.errorMessage ?? 'unknown error'}`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

async function workerCommand(config: Config, parsed: Parsed): Promise<void> {
  await withServices(config, async (services) => {
    const { workers } = services;
    try {
      if (parsed.command === 'worker-add') {
        if (!parsed.address) throw new UsageError('worker-add needs --address https://HOST:PORT');
        const ceiling = { vcpu: size(parsed, 'vcpus'), memoryMib: size(parsed, 'memory-mib'), diskMib: size(parsed, 'disk-mib') };
        const { worker, joinToken } = await workers.add(requireName(parsed), parsed.address, ceiling);
        process.stdout.write(`${joinToken}\n`);
        say(`registered worker ${worker.name} at ${worker.address}; start it with KISTE_WORKER_JOIN_TOKEN set to the token above (shown once)`);
      } else if (parsed.command === 'worker-drain') {
        const drained = await workers.drain(requireName(parsed));
        say(`worker ${drained.name} takes no new machines now`);
        if (parsed.move) await moveAllOff(config, services, drained.id);
      } else if (parsed.command === 'worker-activate') {
        say(`worker ${(await workers.activate(requireName(parsed))).name} takes new machines again`);
      } else if (parsed.command === 'worker-lost') {
        const { worker, machines, busy } = await services.workerLoss.declareLost(requireName(parsed));
        for (const machine of machines) process.stdout.write(`${machine}\n`);
        say(`worker ${worker.name} is lost: ${machines.length} machine${machines.length === 1 ? '' : 's'} marked so`);
        if (busy.length) throw new AdminError(`busy with another operation, not marked: ${busy.join(', ')}; run worker-lost again`);
      } else if (parsed.command === 'worker-repin') {
        await workers.repin(requireName(parsed));
        say(`worker ${parsed.name}: the certificate it presents next is pinned`);
      } else if (parsed.command === 'worker-remove') {
        const removed = await workers.remove(requireName(parsed));
        say(`worker ${parsed.name} removed`);
        if (removed.state === 'lost') say(`${parsed.name} was lost: should its host ever run again, wipe its data folder before anything else (no control plane reaches it now to end its machines)`);
      } else if (parsed.command === 'workers') {
        const list = await workers.list();
        const loads = await workers.loads(list.map((worker) => worker.id));
        printTable(['NAME', 'ADDRESS', 'STATE', 'ANSWERS', 'PLACES UP TO (VCPU/MEM/DISK MIB)', 'MACHINES', 'LAST ERROR'], list.map((worker) => [
          worker.name,
          worker.address,
          worker.state,
          workers.isLive(worker) ? (workers.isPlaceable(worker) ? 'yes' : 'adopting') : 'no',
          ((offer) => `${offer.vcpu}/${offer.memoryMib}/${offer.diskMib}`)(offerOf(worker)),
          String(loads.get(worker.id)?.machines ?? 0),
          worker.lastError ?? '-',
        ]));
        say(`${list.length} worker${list.length === 1 ? '' : 's'}`);
      } else {
        const names = new Map((await workers.list()).map((worker) => [worker.id, worker.name]));
        const machines = await workers.placedMachines();
        printTable(['MACHINE', 'ACCOUNT', 'STATUS', 'WORKER'], machines.map((machine) => [
          machine.name, machine.accountEmail, machine.status, machine.workerId ? names.get(machine.workerId) ?? machine.workerId : '(this host)',
        ]));
        say(`${machines.length} machine${machines.length === 1 ? '' : 's'}`);
      }
    } catch (error) {
      if (error instanceof WorkerAdminError) throw new AdminError(error.message);
      throw error;
    }
  });
}

export async function main(argv: string[]): Promise<number> {
  try {
    const parsed = parse(argv);
    if (parsed === 'help') {
      process.stdout.write(USAGE);
      return 0;
    }
    let config: Config;
    try {
      config = loadConfig();
    } catch (error) {
      if (error instanceof ConfigError) throw new UsageError(error.message);
      throw error;
    }
    if (parsed.command === 'create-account') await createAccount(config, parsed);
    else if (parsed.command === 'mint-key') await mintKey(config, parsed);
    else if (parsed.command === 'list-accounts') await listAccounts(config);
    else await workerCommand(config, parsed);
    return 0;
  } catch (error) {
    if (error instanceof UsageError) {
      say(error.message);
      process.stderr.write(error.showUsage ? `\n${USAGE}` : 'kiste admin: see npm run admin -- --help\n');
      return 2;
    }
    if (error instanceof AdminError) {
      say(error.message);
      return 1;
    }
    if (error instanceof KisteError) {
      say(`${error.message.replace(/\.$/, '')} (code ${error.code})`);
      return 1;
    }
    say(`failed: ${error instanceof Error ? error.message : String(error)}`);
    return 1;
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
