// The host key clients pin for `<name>.kiste`: the machine's Ed25519 key when it has one (every
// OpenSSH since 6.5 prefers it), else the first key the guest reported. Keys are recorded when the
// machine is personalised and stay valid while it is stopped (they live on its disk).
import { KisteError } from '../errors';
import type { Instance } from '../store/instances';
import { parsePublicKey } from './ssh-public-key';

/** The host name `kiste ssh` and `kiste ssh-config` use for an instance. */
export const SSH_ALIAS_SUFFIX = '.kiste';

export interface SshHostKey {
  instance: string;
  alias: string;
  algorithm: string;
  publicKey: string;
  fingerprintSha256: string;
  knownHostsLine: string;
}

const PREFERRED = ['ssh-ed25519', 'ecdsa-sha2-nistp256'];

export function sshHostKeyOf(instance: Instance): SshHostKey {
  const recorded = Array.isArray(instance.sshHostKeys) ? (instance.sshHostKeys as Array<{ algorithm?: unknown; public_key?: unknown }>) : [];
  const keys = recorded.filter((k): k is { algorithm: string; public_key: string } => typeof k?.algorithm === 'string' && typeof k.public_key === 'string');
  const rank = (algorithm: string) => (PREFERRED.includes(algorithm) ? PREFERRED.indexOf(algorithm) : PREFERRED.length);
  const key = [...keys].sort((a, b) => rank(a.algorithm) - rank(b.algorithm))[0];
  if (!key) {
    throw new KisteError('K04', { message: `Instance ${instance.name} has no SSH host key yet: it has not finished its first start` });
  }
  const parsed = parsePublicKey(key.public_key);
  const alias = `${instance.name}${SSH_ALIAS_SUFFIX}`;
  const publicKey = parsed.line.split(' ').slice(0, 2).join(' ');
  return { instance: instance.name, alias, algorithm: parsed.algorithm, publicKey, fingerprintSha256: parsed.fingerprint, knownHostsLine: `${alias} ${publicKey}` };
}
