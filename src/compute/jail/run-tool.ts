// The host tools the jail drives (nft, setfacl, getfacl): run to completion with a time limit; a
// failure carries the tool's own message.
import { execFile } from 'node:child_process';

export function runTool(command: string, args: string[], input?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(command, args, { timeout: 10_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${command} ${args.join(' ')}: ${(stderr || error.message).trim()}`));
      else resolve(stdout);
    });
    child.stdin?.on('error', () => undefined); // a tool may exit before reading (an error it reports above)
    child.stdin?.end(input ?? '');
  });
}
