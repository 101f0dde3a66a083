// Agent configuration from the environment. Everything that touches the machine (paths, ports) can
// be pointed elsewhere, so the test suite runs the real bundle on a development host against fixtures.
import { GUEST_PORT_PATH } from '../../src/protocol/agent';

export type LinkConfig =
  | { mode: 'device'; path: string }
  | { mode: 'listen'; path: string }
  | { mode: 'connect'; path: string };

export interface AgentConfig {
  link: LinkConfig;
  /** Prefix for /etc, /root and the file system that disk metrics describe. */
  root: string;
  /** Where /proc is (fixtures in tests). */
  proc: string;
  sshHost: string;
  sshPort: number;
  /** Environment every command starts from; the request's env is laid over it. */
  commandEnv: Record<string, string>;
  logLevel: 'debug' | 'info' | 'silent';
}

const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export function loadConfig(env: NodeJS.ProcessEnv = process.env): AgentConfig {
  const link: LinkConfig = env.KISTE_AGENT_LISTEN
    ? { mode: 'listen', path: env.KISTE_AGENT_LISTEN }
    : env.KISTE_AGENT_CONNECT
      ? { mode: 'connect', path: env.KISTE_AGENT_CONNECT }
      : { mode: 'device', path: env.KISTE_AGENT_PORT || GUEST_PORT_PATH };
  const sshPort = Number(env.KISTE_AGENT_SSH_PORT || 22);
  const level = env.KISTE_AGENT_LOG;
  return {
    link,
    root: env.KISTE_AGENT_ROOT || '/',
    proc: env.KISTE_AGENT_PROC || '/proc',
    sshHost: env.KISTE_AGENT_SSH_HOST || '127.0.0.1',
    sshPort: Number.isInteger(sshPort) && sshPort > 0 && sshPort < 65536 ? sshPort : 22,
    commandEnv: {
      PATH: env.PATH || DEFAULT_PATH,
      HOME: '/root',
      USER: 'root',
      LOGNAME: 'root',
      SHELL: '/bin/sh',
      LANG: 'C.UTF-8',
    },
    logLevel: level === 'debug' || level === 'silent' ? level : 'info',
  };
}
