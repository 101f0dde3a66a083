import type { Handler } from '../src/http/handler';
import { sshHostKeyOf } from '../src/domain/ssh-host-key';

export const handler: Handler<'GetSshHostKey'> = async ({ auth, services, params }) => {
  const key = sshHostKeyOf(await services.instances.get(auth.accountId, params.name));
  return {
    status: 200,
    body: {
      object: 'ssh_host_key', instance: key.instance, alias: key.alias, algorithm: key.algorithm,
      public_key: key.publicKey, fingerprint_sha256: key.fingerprintSha256, known_hosts_line: key.knownHostsLine,
    },
  };
};
