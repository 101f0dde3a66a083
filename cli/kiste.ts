// kiste: the command-line client of a kiste service. Global options: --url, --token, --json.
// Exit status: the command's own (exec, ssh), 0 on success, 1 on an error the service reported
// (message, hint and request id on stderr), on an image whose build failed and on a machine whose
// environment setup failed (`kiste setup`), 255 when the SSH tunnel could not be opened.
import { Command } from 'commander';
import { addDeviceKey, createApiKey, deleteDeviceKey, listApiKeys, listDeviceKeys, revokeApiKey, watchEvents } from './account';
import { apiFor, CliError, ok, requireToken } from './api';
import { resolveContext, type CliContext } from './context';
import { runExec } from './exec';
import { FOLLOW_WINDOW_LINES, lastLines, newLogText } from './log-follow';
import { runLogin, runLogout } from './login';
import { CLEARABLE, createEnvironment, EnvironmentFlags, environmentVersions, instanceSetup, listEnvironments, showEnvironment, updateEnvironment } from './environments';
import { createImage, deleteImage, imageLog, listComponents, listImages, resolveImage, runtimeImage, showImage } from './images';
import { CREATE_DEFAULTS, createMachine, type CreateOptions, deleteMachine, describe, extendMachine, forkMachine, getMachine, lifecycle, listMachines, machineLogs, machineMetrics, renameMachine } from './machines';
import { exposeService, listServices, unexposeService } from './services';
import { deleteSnapshot, listSnapshots, takeSnapshot } from './snapshots';
import { runSsh, sshConfigBlock } from './ssh';
import { runTunnel } from './tunnel';
import { CLI_VERSION } from './version';

const program = new Command('kiste')
  .description('Machines on a kiste service: create, run commands, SSH, terminal, published ports.')
  .version(CLI_VERSION, '-V, --version')
  .option('--url <url>', 'the service (default: KISTE_URL, the config file, http://127.0.0.1:8080)')
  .option('--token <token>', 'an API key or CLI sign-in token (default: KISTE_TOKEN, the config file)')
  .option('--json', 'machine-readable output')
  .showHelpAfterError();

const COMPONENT_HELP = `
Components are ID or ID@VERSION: a component of \`kiste images components\` (default: its catalogue version),
or deb:PACKAGE for any Debian package (default: latest), built into a layer of the image.`;

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
  .option('--vcpu <n>', `virtual CPUs (default: the --image's recommended, else ${CREATE_DEFAULTS.vcpu})`, toInt)
  .option('--memory <mib>', `memory in MiB (default: the --image's recommended, else ${CREATE_DEFAULTS.memory})`, toInt)
  .option('--disk <mib>', `disk in MiB (default: the --image's recommended, else ${CREATE_DEFAULTS.disk})`, toInt)
  .option('--ssh-key <file>', 'public key the machine trusts (default: ~/.ssh/id_ed25519.pub, id_ecdsa.pub or id_rsa.pub)')
  .option('--ttl <seconds>', 'stop and delete it after this long', toInt)
  .option('--image <id>', 'a private image (ID, slug or name; see `kiste images`); default: the built-in image')
  .option('--env <name>', 'apply this environment\'s current version (files before the machine is answered, clones and the setup script after: see `kiste setup NAME`)')
  .option('--snapshot <snapshot>', 'make it from a named snapshot (ID or name; see `kiste snapshots`): it continues the snapshot\'s memory when it keeps its vCPUs and memory (the defaults then), else boots its disk')
  .action(async (name: string | undefined, options: CreateOptions) => {
    const ctx = context();
    const instance = await createMachine(ctx, name, options);
    print(ctx, instance, describe(instance));
    if (options.env && !ctx.json) process.stderr.write(`The environment's repositories and setup script go on in the background: \`kiste setup ${instance.name} --wait\` follows them.\n`);
  });

program
  .command('setup <name>')
  .description('the environment setup of a machine: status, steps with durations, output (exit status 1 when it failed)')
  .option('--wait', 'wait while it is pending or running')
  .action(async (name: string, options: { wait?: boolean }) => {
    const ctx = context();
    const setup = await instanceSetup(ctx, name, { wait: Boolean(options.wait) });
    print(ctx, setup.json, setup.text);
    if (setup.failed) process.exitCode = 1;
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
  .description('a copy-on-write copy of a machine, booted fresh (with --memory: continuing its running processes)')
  .option('--memory', "the copy continues the source's memory and processes (the source pauses briefly)")
  .action(async (name: string, copy: string, options: { memory?: boolean }) => {
    const ctx = context();
    const instance = await forkMachine(ctx, name, copy, { memory: options.memory ?? false });
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

program
  .command('expose <name> <port>')
  .description('publish a port of a machine at a URL of its own, through the service (only your account may use it unless --public)')
  .option('--public', 'anyone with the URL may use it')
  .option('--name <service>', 'the service\'s name: lower-case letters, digits and inner hyphens, at most 52 (default: port-PORT)')
  .option('--description <text>', 'what it is (shown in lists and the console)')
  .action(async (name: string, port: string, options: { public?: boolean; name?: string; description?: string }) => {
    const ctx = context();
    const exposed = await exposeService(ctx, name, toInt(port), options);
    print(ctx, exposed.json, exposed.text);
    if (!ctx.json) for (const line of exposed.notes) process.stderr.write(`${line}\n`);
  });

program
  .command('snapshot <name> <snapshot>')
  .description('keep the machine\'s disk and memory (a running machine, or one stopped with its session) in a named snapshot; waits until it is ready')
  .option('--disk-only', 'keep the disk alone (the guest\'s file systems are flushed first)')
  .option('--no-wait', 'answer at once while it is being taken')
  .action(async (name: string, snapshot: string, options: { diskOnly?: boolean; wait: boolean }) => show(await takeSnapshot(context(), name, snapshot, options)));
program
  .command('snapshots [machine]')
  .description('the account\'s named snapshots (of one machine, when named)')
  .action(async (machine: string | undefined) => show(await listSnapshots(context(), machine)));
program
  .command('delete-snapshot <snapshot>')
  .description('remove a named snapshot (machines made from it keep running)')
  .action(async (snapshot: string) => show(await deleteSnapshot(context(), snapshot)));

program
  .command('services <name>')
  .description('a machine\'s published ports: name, port, access, status, URL')
  .action(async (name: string) => show(await listServices(context(), name)));

program
  .command('unexpose <name> <service>')
  .description('stop publishing a service of a machine (its URL answers no more)')
  .action(async (name: string, service: string) => show(await unexposeService(context(), name, service)));

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

const images = program.command('images').description('machine images: the built-in one and the account\'s private ones, made from components');
images.command('list', { isDefault: true }).alias('ls').description('the built-in image and the account\'s private images, with their status (the default)')
  .action(async () => show(await listImages(context())));
images.command('components').description('the components an image can be made of (any Debian package besides: deb:PACKAGE)')
  .action(async () => show(await listComponents(context())));
images
  .command('resolve [component...]')
  .description('what an image of these components would hold (exact versions, added dependencies, recommended resources); saves nothing')
  .option('--from <image>', 'build on this private image (ID, slug or name); default: the built-in image')
  .option('--vcpu <n>', 'resources to ask for (the recommendation is at least the components\' minimum)', toInt)
  .option('--memory <mib>', 'memory in MiB to ask for', toInt)
  .option('--disk <mib>', 'disk in MiB to ask for', toInt)
  .addHelpText('after', COMPONENT_HELP)
  .action(async (specs: string[], options: { from?: string; vcpu?: number; memory?: number; disk?: number }) => show(await resolveImage(context(), specs, options)));
images
  .command('create <name> [component...]')
  .description('save a private image; waits while a layer with its deb: packages is built, showing the build steps')
  .option('--from <image>', 'build on this private image (ID, slug or name); default: the built-in image')
  .option('--vcpu <n>', 'recommended vCPUs of its machines (those of --vcpu, --memory, --disk not given: the selection\'s recommendation)', toInt)
  .option('--memory <mib>', 'recommended memory in MiB', toInt)
  .option('--disk <mib>', 'recommended disk in MiB', toInt)
  .option('--no-wait', 'answer at once, also while the image is still building (Ctrl-C while waiting only stops the waiting)')
  .addHelpText('after', COMPONENT_HELP)
  .action(async (name: string, specs: string[], options: { from?: string; vcpu?: number; memory?: number; disk?: number; wait: boolean }) =>
    show(await createImage(context(), name, specs, options)));
images.command('show <id>').description('one image (ID, slug or name), with its build').action(async (id: string) => show(await showImage(context(), id)));
images
  .command('log <id>')
  .description('the build log of a private image (the last 256 KiB; empty when it needed no build)')
  .option('-f, --follow', 'keep printing while the image is building')
  .action(async (id: string, options: { follow?: boolean }) => {
    await imageLog(context(), id, { follow: Boolean(options.follow) }, (text) => process.stdout.write(text));
  });
images.command('delete <id>').alias('rm').description('delete a private image (refused while a machine uses it)').action(async (id: string) => show(await deleteImage(context(), id)));
images.command('runtime').description('the image version the service serves, with its release notes').action(async () => show(await runtimeImage(context())));

const envs = program.command('envs').description('environments: repositories, variables, secret files and a setup script applied to new machines (`kiste create --env`)');
envs.command('list', { isDefault: true }).alias('ls').description('the account\'s environments (the default)').action(async () => show(await listEnvironments(context())));
envs.command('show <name>').description('an environment\'s current version (secret files by path only)').action(async (name: string) => show(await showEnvironment(context(), name)));
envs
  .command('versions <name>')
  .description('an environment\'s versions, newest first')
  .option('--limit <n>', 'how many (1 to 100)', toInt, 20)
  .action(async (name: string, options: { limit: number }) => show(await environmentVersions(context(), name, options.limit)));
environmentOptions(envs.command('create <name>').description('create an environment (its version 1)'), false)
  .action(async (name: string) => show(await createEnvironment(context(), name, environmentFlags)));
environmentOptions(envs.command('update <name>').description('publish a new version: a kind of flag given replaces that field whole; fields not given are kept'), true)
  .action(async (name: string) => show(await updateEnvironment(context(), name, environmentFlags)));

program
  .command('events')
  .description('the account\'s event stream, oldest first')
  .option('--after <sequence>', 'only events after this sequence', toInt, 0)
  .option('-f, --follow', 'keep waiting for new events')
  .action(async (options: { after: number; follow?: boolean }) => {
    await watchEvents(context(), { after: options.after, follow: Boolean(options.follow) }, (line) => process.stdout.write(`${line}\n`));
  });

/** The environment flags of this command line, in the order given (see EnvironmentFlags). */
const environmentFlags = new EnvironmentFlags();

function environmentOptions(command: Command, update: boolean): Command {
  const collect = (apply: (value: string) => void) => (value: string) => apply(value);
  command
    .option('--repo <url[#ref]>', 'a git repository to clone (https://, http://, ssh://, git:// or user@host:path; #REF: a branch, tag or commit) (repeatable)', collect((v) => environmentFlags.repo(v)))
    .option('--path <dir>', 'checkout directory of the --repo before it (absolute; default /root/<repository name>)', collect((v) => environmentFlags.path(v)))
    .option('--credentials <guest-path>', 'clone credentials of the --repo before it: the guest path of a --secret-file (a git-credentials file for http(s), a private key for ssh)', collect((v) => environmentFlags.credentials(v)))
    .option('--var <name=value>', 'an environment variable of the machine\'s commands (repeatable)', collect((v) => environmentFlags.variable(v)))
    .option('--secret-file <guest-path=local-file>', 'a file written into the machine, read from a local file and kept encrypted; its content is never shown (repeatable)', collect((v) => environmentFlags.secretFile(v)))
    .option('--setup-script <file>', 'a script run once in each new machine after the clones (- reads stdin)', collect((v) => environmentFlags.setupScriptFile(v)));
  if (update) command.option('--clear <field>', `empty a field in the new version: ${CLEARABLE.join(', ')} (repeatable)`, collect((v) => environmentFlags.clearField(v)));
  return command.addHelpText('after', `
The flags are read in order: --path and --credentials apply to the --repo given last. ${update
    ? 'A kind of flag given replaces that field whole (e.g. one --var drops the variables not repeated); a kind not given keeps the current version\'s value, so secret files need not be sent again.'
    : 'A kind of flag not given leaves that field empty.'}

Example:
  kiste envs ${update ? 'update' : 'create'} web \\
    --repo https://git.example.com/acme/web.git#main --path /srv/web --credentials /root/.git-credentials \\
    --secret-file /root/.git-credentials=./git-credentials --var NODE_ENV=production --setup-script ./setup.sh`);
}

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
