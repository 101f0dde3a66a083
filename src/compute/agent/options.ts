// Client options and their defaults, resolved once so the connection and the client facade read
// the same values.
import type { Duplex } from 'node:stream';
import { clampWindow } from '../../protocol/agent';

export interface AgentLogger {
  debug(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

export interface AgentClientOptions {
  /** Opens a new byte stream to the agent: for a machine, a connection to QEMU's chardev socket. */
  connect: () => Duplex | Promise<Duplex>;
  /** Default per-request timeout. */
  requestTimeoutMs?: number;
  /** SYNC is repeated (with a new nonce) this often until the agent answers. */
  syncRetryMs?: number;
  /** Reconnect after the stream ends (default true). */
  reconnect?: boolean;
  reconnectMinMs?: number;
  reconnectMaxMs?: number;
  /** Output credit per exec / tcp channel. */
  windowBytes?: number;
  /**
   * How long after a command's timeout (or a cancel's grace) its exit may take to arrive before the
   * host gives the command up: the guest is not trusted to end it, and TCG is slow (default 30 s).
   */
  exitGraceMs?: number;
  hostVersion?: string;
  logger?: AgentLogger;
  /** The link was dropped because the agent misbehaved (counted by the service's metrics). */
  onLinkDropped?: (reason: string) => void;
}

export interface RequestOptions {
  timeoutMs?: number;
}

export type ResolvedOptions = Required<Omit<AgentClientOptions, 'logger' | 'hostVersion' | 'onLinkDropped'>> & Pick<AgentClientOptions, 'hostVersion'>;

/** How long an agent request may take when its caller names no time (AgentClient's default). */
export const AGENT_REQUEST_MS = 10_000;

export const NOOP_LOGGER: AgentLogger = { debug: () => undefined, warn: () => undefined };

export function resolveOptions(options: AgentClientOptions): ResolvedOptions {
  return {
    connect: options.connect,
    requestTimeoutMs: options.requestTimeoutMs ?? AGENT_REQUEST_MS,
    syncRetryMs: options.syncRetryMs ?? 1000,
    reconnect: options.reconnect ?? true,
    reconnectMinMs: options.reconnectMinMs ?? 100,
    reconnectMaxMs: options.reconnectMaxMs ?? 2000,
    windowBytes: clampWindow(options.windowBytes ?? 1024 * 1024),
    exitGraceMs: options.exitGraceMs ?? 30_000,
    hostVersion: options.hostVersion,
  };
}
