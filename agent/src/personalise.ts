// personalise: host name, root's authorized_keys and, once per new disk (first boot, and after a
// fork), fresh SSH host keys and a fresh machine id. All files live under config.root so tests can
// run it against a temporary directory.
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import type { HostKey, PersonaliseResult } from '../../src/protocol/agent';
import { runCommand } from './commands';
import type { AgentConfig } from './config';
import { AgentError } from './errors';
import { exists, writeAtomic } from './files';
import type { Logger } from './log';
import { readMachineId, resetMachineId } from './machine-id';
import { mixHostEntropy, renewRestoredGuest, restoredGuestRequest, restoredRandom } from './restored-guest';
import { bool, object, str, strings } from './validate';

const HOSTNAME = /^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/i;

export async function personalise(raw: unknown, config: AgentConfig, log: Logger): Promise<PersonaliseResult> {
  const p = object(raw);
  const hostname = str(p, 'hostname', { max: 253 }) as string;
  if (!HOSTNAME.test(hostname)) throw new AgentError('bad_request', `invalid host name ${JSON.stringify(hostname)}`);
  const keys = strings(p, 'authorized_keys', { max: 1000 });
  for (const key of keys) {
    if (/[\r\n\0]/.test(key) || key.length > 16384 || key.trim() === '') throw new AgentError('bad_request', 'each authorized key must be one non-empty line');
  }
  const regenerate = bool(p, 'regenerate_host_keys');
  const givenKeys = hostKeyFiles(p.host_keys);
  const restored = restoredGuestRequest(p.restored);
  const root = config.root;
  const env = config.commandEnv;
  if (restored) await mixHostEntropy(restored, config, log);

  await writeAtomic(join(root, 'etc/hostname'), `${hostname}\n`, 0o644);
  await setHostsEntry(join(root, 'etc/hosts'), hostname);
  await runCommand('hostname', [hostname], env);

  const sshDir = join(root, 'root/.ssh');
  await fs.mkdir(sshDir, { recursive: true, mode: 0o700 });
  await fs.chmod(sshDir, 0o700);
  await writeAtomic(join(sshDir, 'authorized_keys'), keys.map((k) => `${k.trim()}\n`).join(''), 0o600);

  const sshEtc = join(root, 'etc/ssh');
  if (regenerate) {
    // Same trigger as the host keys: the host asks exactly once per new disk, so a fork stops
    // sharing its source's identity.
    await resetMachineId(root, restored ? restoredRandom(restored) : undefined);
    await fs.mkdir(sshEtc, { recursive: true });
    for (const name of await fs.readdir(sshEtc)) {
      if (/^ssh_host_.*_key(\.pub)?$/.test(name)) await fs.rm(join(sshEtc, name), { force: true });
    }
    if (givenKeys) {
      // Made by the host (seconds faster than ssh-keygen on an emulated CPU).
      for (const key of givenKeys) {
        const base = join(sshEtc, `ssh_host_${KEY_FILE_NAMES[key.algorithm]}_key`);
        await writeAtomic(base, key.private_key, 0o600);
        await writeAtomic(`${base}.pub`, `${key.public_key}\n`, 0o644);
      }
    } else {
      // An older host: -A makes every default key type; -f gives it the root prefix (OpenSSH >= 7.8).
      await runCommand('ssh-keygen', root === '/' ? ['-A'] : ['-A', '-f', root], env, 300_000);
    }
    if (await exists(join(root, 'run/systemd/system'))) {
      try {
        await runCommand('systemctl', ['reload-or-restart', 'ssh'], env);
      } catch (error) {
        // The keys are in place; sshd picks them up at its next start at the latest.
        log.warn('could not reload ssh', { error: error instanceof Error ? error.message : String(error) });
      }
    }
  }
  if (restored) await renewRestoredGuest(restored, config, log);
  return { hostname, host_keys: await hostKeys(sshEtc), machine_id: await readMachineId(root) };
}

/** File name part per key type: /etc/ssh/ssh_host_<name>_key, as ssh-keygen -A names them. */
const KEY_FILE_NAMES: Record<string, string> = { 'ssh-ed25519': 'ed25519', 'ecdsa-sha2-nistp256': 'ecdsa' };

interface HostKeyFile {
  algorithm: string;
  private_key: string;
  public_key: string;
}

/** host_keys from the host: each a known type, an OpenSSH private key and its one-line public key. */
function hostKeyFiles(raw: unknown): HostKeyFile[] | null {
  if (raw === undefined || raw === null) return null;
  if (!Array.isArray(raw) || raw.length === 0 || raw.length > 4) throw new AgentError('bad_request', 'host_keys must be an array of 1 to 4 keys');
  return raw.map((item, i) => {
    const key = object(item);
    const algorithm = str(key, 'algorithm') as string;
    const privateKey = str(key, 'private_key', { max: 16384 }) as string;
    const publicKey = str(key, 'public_key', { max: 16384 }) as string;
    if (!(algorithm in KEY_FILE_NAMES)) throw new AgentError('bad_request', `host_keys[${i}]: unsupported key type ${JSON.stringify(algorithm)}`);
    if (!/^-----BEGIN OPENSSH PRIVATE KEY-----\n[A-Za-z0-9+/=\n]+-----END OPENSSH PRIVATE KEY-----\n$/.test(privateKey)) {
      throw new AgentError('bad_request', `host_keys[${i}]: private_key is not an OpenSSH private key`);
    }
    if (!new RegExp(`^${algorithm} [A-Za-z0-9+/]+={0,2}$`).test(publicKey)) {
      throw new AgentError('bad_request', `host_keys[${i}]: public_key must be "${algorithm} <base64>"`);
    }
    return { algorithm, private_key: privateKey, public_key: publicKey };
  });
}

export async function hostKeys(sshEtc: string): Promise<HostKey[]> {
  let names: string[];
  try {
    names = await fs.readdir(sshEtc);
  } catch {
    return [];
  }
  const keys: HostKey[] = [];
  for (const name of names.filter((n) => /^ssh_host_.*_key\.pub$/.test(n)).sort()) {
    const [algorithm, blob] = (await fs.readFile(join(sshEtc, name), 'utf8')).trim().split(/\s+/);
    if (algorithm && blob) keys.push({ algorithm, public_key: `${algorithm} ${blob}` });
  }
  return keys;
}

async function setHostsEntry(path: string, hostname: string): Promise<void> {
  // Debian maps the host name to 127.0.1.1; without it sudo and others complain.
  let text: string;
  try {
    text = await fs.readFile(path, 'utf8');
  } catch {
    text = '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n';
  }
  const short = hostname.split('.')[0];
  const entry = short === hostname ? `127.0.1.1\t${hostname}` : `127.0.1.1\t${hostname} ${short}`;
  const lines = text.split('\n').filter((line, i, all) => !(i === all.length - 1 && line === ''));
  const at = lines.findIndex((line) => /^127\.0\.1\.1\s/.test(line));
  if (at >= 0) lines[at] = entry;
  else lines.push(entry);
  await writeAtomic(path, `${lines.join('\n')}\n`, 0o644);
}
