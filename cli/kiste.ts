// kiste: the command-line client of a kiste service. Global options: --url, --token, --json.
// Exit status: the command's own (exec, ssh), 0 on success, 1 on an error the service reported
// (message, hint and request id on stderr), 255 when the SSH tunnel could not be opened.
import { Command } from 'commander';
import { addDeviceKey, createApiKey, deleteDeviceKey, listApiKeys, listDeviceKeys, revokeApiKey, watchEvents } from './account';
import { apiFor, CliError, ok, requireToken } from './api';
import { resolveContext, type CliContext } from './context';
import { runExec } from './exec';
import { FOLLOW_WINDOW_LINES, lastLines, newLogText } from './log-follow';
import { runLogin, runLogout } from './login';
import { createMachine, type CreateOptions, deleteMachine, describe, extendMachine, forkMachine, getMachine, lifecycle, listMachines, machineLogs, machineMetrics, renameMachine } from './machines';
import { runSsh, sshConfigBlock } from './ssh';
import { runTunnel } from './tunnel';
import { CLI_VERSION } from './version';

const program = new Command('kiste')
  .description('Machines on a kiste service: create, run commands, SSH, terminal.')
  .version(CLI_VERSION, '-V, --version')
  .option('--url <url>', 'the service (default: KISTE_URL, the config file, http://127.0.0.1:8080)')
  .option('--token <token>', 'an API key or CLI sign-in token (default: KISTE_TOKEN, the config file)')
  .option('--json', 'machine-readable output')
  .showHelpAfterError();

const context = (): CliContext => resolveContext(program.opts());

program
  .command('login')
  .description('sign in with the browser (OAuth); the sign-in is kept in the config file')
  .option('--no-browser', 'only print the address to open')
  .action(async (options: { browser: boolean }) => {
    const ctx = context();
    const { email } = await runLogin(ctx, options);
    print(ctx, { signed_in: true, email, url: ctx.url }, `Signed in to ${ctx.url} as ${email}.`);
  });

program
  .command('logout')
  .description('end this sign-in and forget it')
  .action(async () => {
    const ctx = context();
    await runLogout(ctx);
    print(ctx, { signed_out: true }, 'Signed out.');
  });

program
  .command('whoami')
  .description('the signed-in account')
  .action(async () => {
    const ctx = context();
    requireToken(ctx);
    const me = ok(await apiFor(ctx).GET('/v1/me'));
    print(ctx, me, `${me.email}${me.name ? ` (${me.name})` : ''}`);
  });

const auth = program.command('auth').description('password sign-in of the account');
auth
  .command('unlock')
  .description('lift the lock on password sign-in that repeated failures set (needs `kiste login` or an API key)')
  .action(async () => {
    const ctx = context();
    requireToken(ctx);
    const answer = ok(await apiFor(ctx).POST('/v1/auth/unlock'));
    print(ctx, answer, answer.message);
  });

program
  .command('list')
  .alias('ls')
  .description('the account\'s machines')
  .action(async () => show(await listMachines(context())));

program
  .command('get <name>')
  .description('one machine')
  .action(async (name: string) => show(await getMachine(context(), name)));

program
  .command('create [name]')
  .description('create a machine and wait until it runs (SSH and commands accepted)')
  .option('--vcpu <n>', 'virtual CPUs', toInt, 2)
  .option('--memory <mib>', 'memory in MiB', toInt, 2048)
  .option('--disk <mib>', 'disk in MiB', toInt, 16384)
  .option('--ssh-key <file>', 'public key the machine trusts (default: ~/.ssh/id_ed25519.pub, id_ecdsa.pub or id_rsa.pub)')
  .option('--ttl <seconds>', 'stop and delete it after this long', toInt)
  .action(async (name: string | undefined, options: CreateOptions) => {
    const ctx = context();
    const instance = await createMachine(ctx, name, options);
    print(ctx, instance, describe(instance));
  });

for (const action of ['stop', 'resume', 'restart', 'upgrade'] as const) {
  const command = program.command(`${action} <name>`).description({
    stop: 'stop a machine (--snapshot: save its memory; resume continues there)',
    resume: 'start a stopped machine (from its saved memory when it has one)',
    restart: 'reboot a machine',
    upgrade: 'move a machine to the newest image (it reboots; files stay)',
  }[action]);
  if (action === 'stop') command.option('--snapshot', 'save the memory session');
  command.action(async (name: string, options: { snapshot?: boolean }) => {
    const ctx = context();
    const instance = await lifecycle(ctx, name, action, options);
    print(ctx, instance, `${instance.name}: ${instance.status}`);
  });
}

program
  .command('rename <name> <new-name>')
  .description('rename a machine (its host name follows at the next cold boot)')
  .action(async (name: string, newName: string) => {
    const ctx = context();
    const instance = await renameMachine(ctx, name, newName);
    print(ctx, instance, `${name} is now ${instance.name}`);
  });

program
  .command('extend <name> <seconds>')
  .description('push a machine\'s expiry back')
  .action(async (name: string, seconds: string) => {
    const ctx = context();
    const instance = await extendMachine(ctx, name, toInt(seconds));
    print(ctx, instance, `${instance.name} expires at ${instance.expires_at ?? 'never'}`);
  });

program
  .command('fork <name> <copy>')
  .description('a copy-on-write copy of a machine, booted fresh')
  .action(async (name: string, copy: string) => {
    const ctx = context();
    const instance = await forkMachine(ctx, name, copy);
    print(ctx, instance, describe(instance));
  });

program
  .command('delete <name>')
  .alias('rm')
  .description('delete a machine and its disk')
  .action(async (name: string) => {
    const ctx = context();
    await deleteMachine(ctx, name);
    print(ctx, { deleted: true, name }, `${name} deleted`);
  });

program
  .command('logs <name>')
  .description('the machine\'s console log (its last lines)')
  .option('--tail <lines>', 'how many lines', toInt, 200)
  .option('-f, --follow', 'keep printing new lines (Ctrl-C ends)')
  .action(async (name: string, options: { tail: number; follow?: boolean }) => {
    const ctx = context();
    if (!options.follow) {
      const logs = await machineLogs(ctx, name, options.tail);
      return print(ctx, { name, logs }, logs.replace(/\n$/, ''));
    }
    // Every poll asks for the same (largest) window, so consecutive answers overlap line for line.
    let shown = await machineLogs(ctx, name, FOLLOW_WINDOW_LINES);
    process.stdout.write(lastLines(shown, options.tail));
    for (;;) {
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const current = await machineLogs(ctx, name, FOLLOW_WINDOW_LINES);
      process.stdout.write(newLogText(shown, current));
      shown = current;
    }
  });

program
  .command('metrics <name>')
  .description('CPU, memory, disk and uptime of a running machine')
  .action(async (name: string) => show(await machineMetrics(context(), name)));

program
  .command('exec <name> <command...>')
  .description('run a command in a machine; its output streams here and its exit code is kiste\'s')
  .option('--cwd <dir>', 'working directory in the machine')
  .option('--timeout <seconds>', 'stop the command after this long', (v) => Number(v))
  .action(async (name: string, command: string[], options: { cwd?: string; timeout?: number }) => {
    const ctx = context();
    requireToken(ctx);
    process.exitCode = await runExec(ctx, name, command, { cwd: options.cwd, timeoutMs: options.timeout ? options.timeout * 1000 : undefined });
  });

program
  .command('ssh <name> [command...]')
  .description('OpenSSH into a machine through the service (host key pinned from the API)')
  .option('-i, --identity <file>', 'private key file for ssh')
  .option('-o, --option <option>', 'an ssh -o option (repeatable)', (value: string, all: string[] = []) => [...all, value])
  .option('-l, --user <user>', 'user in the machine', 'root')
  .action(async (name: string, command: string[], options: { identity?: string; option?: string[]; user: string }) => {
    process.exitCode = await runSsh(context(), name, options, command);
  });

program
  .command('tunnel <host>')
  .description('ProxyCommand for ssh: carries stdin/stdout to the machine\'s SSH server (host: NAME or NAME.kiste)')
  .action(async (host: string) => {
    await runTunnel(context(), host);
  });

program
  .command('ssh-config')
  .description('a block for ~/.ssh/config that makes `ssh NAME.kiste` work')
  .action(() => {
    process.stdout.write(sshConfigBlock(context()));
  });

const keys = program.command('keys').description('API keys for scripts');
keys.command('list').description('the account\'s API keys (no secrets)').action(async () => show(await listApiKeys(context())));
keys
  .command('create <label>')
  .description('a new API key; its value is printed once, alone on stdout')
  .option('--days <n>', 'lifetime in days (1 to 365)', toInt, 30)
  .action(async (label: string, options: { days: number }) => show(await createApiKey(context(), label, options.days)));
keys.command('revoke <id>').description('end an API key').action(async (id: string) => {
  const ctx = context();
  await revokeApiKey(ctx, id);
  print(ctx, { revoked: true, id }, `revoked ${id}`);
});

const deviceKeys = program.command('device-keys').description('SSH public keys every machine of the account trusts');
deviceKeys.command('list').description('the account\'s device keys').action(async () => show(await listDeviceKeys(context())));
deviceKeys
  .command('add <name> <public-key-file>')
  .description('trust a key (machines take it at their next start or SSH tunnel)')
  .action(async (name: string, file: string) => show(await addDeviceKey(context(), name, file)));
deviceKeys.command('delete <id>').description('stop trusting a key').action(async (id: string) => {
  const ctx = context();
  await deleteDeviceKey(ctx, id);
  print(ctx, { deleted: true, id }, `deleted ${id}`);
});

program
  .command('events')
  .description('the account\'s event stream, oldest first')
  .option('--after <sequence>', 'only events after this sequence', toInt, 0)
  .option('-f, --follow', 'keep waiting for new events')
  .action(async (options: { after: number; follow?: boolean }) => {
    await watchEvents(context(), { after: options.after, follow: Boolean(options.follow) }, (line) => process.stdout.write(`${line}\n`));
  });

function show(result: { json: unknown; text: string }): void {
  print(context(), result.json, result.text);
}

function toInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n)) throw new CliError(`not a whole number: ${value}`);
  return n;
}

function print(ctx: CliContext, value: unknown, text: string): void {
  process.stdout.write(ctx.json ? `${JSON.stringify(value, null, 2)}\n` : `${text}\n`);
}

program.parseAsync(process.argv).catch((error: unknown) => {
  const json = Boolean(program.opts().json);
  if (error instanceof CliError) {
    if (json) process.stderr.write(`${JSON.stringify(error.details.envelope ?? { error: { message: error.message, hint: error.details.hint ?? null } })}\n`);
    else {
      process.stderr.write(`kiste: ${error.message}\n`);
      if (error.details.hint) process.stderr.write(`  hint: ${error.details.hint}\n`);
      if (error.details.requestId) process.stderr.write(`  request id: ${error.details.requestId}\n`);
    }
    process.exit(error.details.exitCode ?? 1);
  }
  process.stderr.write(`kiste: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
