// Running a shell script in a real guest through its agent, for tests that look inside a machine.
import type { TestService } from './harness';

/** stdout is decoded as `stdoutEncoding` (latin1 keeps binary output byte for byte). */
export async function guestRun(t: TestService, instanceId: string, script: string, stdoutEncoding: BufferEncoding = 'utf8'): Promise<{ stdout: string; stderr: string; exitCode: number }> {
  const handle = await t.services.machineHost.agent(instanceId).exec({ argv: ['sh', '-c', script] });
  let stdout = '';
  let stderr = '';
  for await (const chunk of handle) {
    if (chunk.stream === 'stdout') stdout += chunk.data.toString(stdoutEncoding);
    else stderr += chunk.data.toString('utf8');
  }
  return { stdout, stderr, exitCode: (await handle.exit).exit_code };
}
