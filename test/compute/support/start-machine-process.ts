// Stands in for the service in the crash test: starts one machine with the real driver, prints
// `started <pid>` and then waits to be killed with SIGKILL, holding the machine's QMP connection.
import { startMachine } from '../../../src/compute/qemu/qemu-process';
import type { MachineSpec } from '../../../src/compute/qemu/command-line';

async function main(): Promise<void> {
  const spec = JSON.parse(process.argv[2]) as MachineSpec;
  const machine = await startMachine(spec);
  process.stdout.write(`started ${machine.pid}\n`);
  setInterval(() => undefined, 60_000);
}

main().catch((error: Error) => {
  process.stderr.write(`${error.stack ?? error.message}\n`);
  process.exit(1);
});
