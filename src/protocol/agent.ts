// The kiste host↔agent protocol (agent/PROTOCOL.md): framing, flow-control helpers and the typed
// methods and events. Shared by the host (src/compute/agent-client.ts) and the guest agent
// (agent/src, which bundles this file), so it uses nothing but Buffer. Part of the ground-floor
// module src/protocol (README.md there): it imports nothing from the rest of src.

export const PROTOCOL_VERSION = 1;
export const SUPPORTED_PROTOCOL_VERSIONS: readonly number[] = [1];
/** virtio-serial port name; the guest sees it as /dev/virtio-ports/org.kiste.agent. */
export const PORT_NAME = 'org.kiste.agent';
export const GUEST_PORT_PATH = `/dev/virtio-ports/${PORT_NAME}`;

// ---------------------------------------------------------------------------------------------
// Frames: u32 length | u8 kind | u32 channel | payload  (big endian; length counts kind+channel+payload)

export const FrameKind = {
  REQUEST: 1,
  RESPONSE: 2,
  EVENT: 3,
  DATA: 4,
  WINDOW: 5,
  CLOSE: 6,
  SYNC: 7,
} as const;
export type FrameKind = (typeof FrameKind)[keyof typeof FrameKind];

export interface Frame {
  kind: FrameKind;
  channel: number;
  payload: Buffer;
}

export const HEADER_BYTES = 9;
/** Largest payload a decoder accepts: big enough for an exec argv near Linux's ARG_MAX. */
export const MAX_PAYLOAD = 4 * 1024 * 1024;
/** Senders cut DATA into pieces of at most this many bytes, so one stream cannot hog the link. */
export const MAX_DATA_CHUNK = 64 * 1024;
export const CONTROL_CHANNEL = 0;
export const SYNC_CHANNEL = 0xffffffff;
/** Credit each side of a stream channel starts with, unless the opener names another. */
export const DEFAULT_WINDOW = 256 * 1024;
export const MIN_WINDOW = 16 * 1024;
export const MAX_WINDOW = 16 * 1024 * 1024;

const EMPTY = Buffer.alloc(0);

export function isFrameKind(kind: number): kind is FrameKind {
  return kind >= FrameKind.REQUEST && kind <= FrameKind.SYNC;
}

export function encodeHeader(kind: FrameKind, channel: number, payloadLength: number): Buffer {
  const header = Buffer.allocUnsafe(HEADER_BYTES);
  header.writeUInt32BE(payloadLength + 5, 0);
  header.writeUInt8(kind, 4);
  header.writeUInt32BE(channel >>> 0, 5);
  return header;
}

export function encodeFrame(kind: FrameKind, channel: number, payload: Buffer = EMPTY): Buffer {
  if (payload.length > MAX_PAYLOAD) throw new RangeError(`frame payload of ${payload.length} bytes exceeds ${MAX_PAYLOAD}`);
  const frame = Buffer.allocUnsafe(HEADER_BYTES + payload.length);
  frame.writeUInt32BE(payload.length + 5, 0);
  frame.writeUInt8(kind, 4);
  frame.writeUInt32BE(channel >>> 0, 5);
  payload.copy(frame, HEADER_BYTES);
  return frame;
}

/** JSON frames (REQUEST, RESPONSE, EVENT) are UTF-8, so they can never contain the sync pattern (it has 0xFF bytes). */
export function encodeJson(kind: FrameKind, channel: number, value: unknown): Buffer {
  return encodeFrame(kind, channel, Buffer.from(JSON.stringify(value), 'utf8'));
}

export function decodeJson(frame: Frame): unknown {
  return JSON.parse(frame.payload.toString('utf8'));
}

export function encodeWindow(channel: number, increment: number): Buffer {
  const payload = Buffer.allocUnsafe(4);
  payload.writeUInt32BE(increment >>> 0, 0);
  return encodeFrame(FrameKind.WINDOW, channel, payload);
}

export function decodeWindow(frame: Frame): number {
  return frame.payload.length === 4 ? frame.payload.readUInt32BE(0) : 0;
}

export function encodeClose(channel: number, reason = ''): Buffer {
  return encodeFrame(FrameKind.CLOSE, channel, Buffer.from(reason.slice(0, 1024), 'utf8'));
}

// ---------------------------------------------------------------------------------------------
// Resynchronisation. A SYNC frame is a fixed 26-byte frame whose first 17 bytes (SYNC_PATTERN) never
// occur anywhere else in a well-formed stream: JSON frames cannot contain its 0xFF bytes, and senders
// cut DATA payloads around it (dataPieces). So a decoder that meets the pattern inside what it took
// for a frame knows that frame is a stale fragment (from before a reconnect or a VM pause) and
// restarts framing at the pattern. A SYNC is sent as (SYNC_PAD zero bytes, SYNC frame) twice: a
// stale fragment missing at most SYNC_PAD bytes is completed by the zeros, whose zero "header"
// (length 0, invalid) then starts a scan; one missing a little more swallows the start of the first
// pattern, and what is left of it can never parse as a header, so the scan finds the second copy.
// Receivers ignore the duplicate (same phase and nonce).

export const SyncPhase = {
  /** host → agent: forget everything before this frame; reset all channels; answer SYNC_OK. */
  SYNC: 0,
  /** agent → host: answer to SYNC, echoing its nonce. */
  SYNC_OK: 1,
  /** agent → host: the agent (re)opened the port; whatever session the host had is gone. */
  ANNOUNCE: 2,
} as const;
export type SyncPhase = (typeof SyncPhase)[keyof typeof SyncPhase];

/** All bytes >= 0x80 (two U+1F4E6 "package" emoji): no 4-byte window inside reads as a valid length. */
const SYNC_MAGIC = Buffer.from('f09f93a6f09f93a6', 'hex');
const SYNC_PAYLOAD_BYTES = SYNC_MAGIC.length + 1 + 8;
export const SYNC_PATTERN = Buffer.concat([encodeHeader(FrameKind.SYNC, SYNC_CHANNEL, SYNC_PAYLOAD_BYTES), SYNC_MAGIC]);
export const SYNC_FRAME_BYTES = HEADER_BYTES + SYNC_PAYLOAD_BYTES;
export const SYNC_PAD = 16;

export interface SyncMarker {
  phase: SyncPhase;
  /** 8 bytes, hex. */
  nonce: string;
}

/** The bytes to send for a SYNC marker: twice (zero pad, SYNC frame). */
export function encodeSync(phase: SyncPhase, nonce: string): Buffer {
  const nonceBytes = Buffer.from(nonce, 'hex');
  if (nonceBytes.length !== 8) throw new RangeError('sync nonce must be 8 bytes of hex');
  const one = SYNC_PAD + SYNC_FRAME_BYTES;
  const out = Buffer.alloc(2 * one);
  for (const at of [0, one]) {
    SYNC_PATTERN.copy(out, at + SYNC_PAD);
    out.writeUInt8(phase, at + SYNC_PAD + SYNC_PATTERN.length);
    nonceBytes.copy(out, at + SYNC_PAD + SYNC_PATTERN.length + 1);
  }
  return out;
}

export function decodeSync(frame: Frame): SyncMarker | null {
  const p = frame.payload;
  if (frame.kind !== FrameKind.SYNC || frame.channel !== SYNC_CHANNEL || p.length !== SYNC_PAYLOAD_BYTES) return null;
  if (!p.subarray(0, SYNC_MAGIC.length).equals(SYNC_MAGIC)) return null;
  const phase = p[SYNC_MAGIC.length];
  if (phase !== SyncPhase.SYNC && phase !== SyncPhase.SYNC_OK && phase !== SyncPhase.ANNOUNCE) return null;
  return { phase, nonce: p.subarray(SYNC_MAGIC.length + 1).toString('hex') };
}

/**
 * Where the sync pattern first occurs in head‖payload, without copying the payload; -1 if nowhere.
 * head is everything of the frame before the payload bytes that the caller cuts.
 */
function findPattern(head: Buffer, payload: Buffer): number {
  const joint = Buffer.concat([head, payload.subarray(0, SYNC_PATTERN.length - 1)]).indexOf(SYNC_PATTERN);
  if (joint >= 0) return joint;
  const inner = payload.indexOf(SYNC_PATTERN);
  return inner >= 0 ? head.length + inner : -1;
}

/**
 * How many bytes of payload may follow head in one DATA frame without the frame containing the sync
 * pattern: payload.length when it is clean (the usual case), otherwise a cut that splits the pattern.
 * Callers send that piece and call again for the rest with a fresh head. A pattern spanning two
 * frames is impossible (the bytes after any cut cannot form a valid DATA header; see the fuzz test).
 */
export function syncSafeLength(head: Buffer, payload: Buffer): number {
  const at = findPattern(head, payload);
  if (at < 0) return payload.length;
  return Math.max(1, at + SYNC_PATTERN.length - 1 - head.length);
}

/** Raw DATA frames (tcp and stdin streams) for payload, cut at MAX_DATA_CHUNK and around the sync pattern. */
export function encodeRawData(channel: number, payload: Buffer): Buffer[][] {
  if (payload.length === 0) return [[encodeHeader(FrameKind.DATA, channel, 0)]];
  const frames: Buffer[][] = [];
  let rest = payload;
  while (rest.length > 0) {
    let piece = rest.subarray(0, MAX_DATA_CHUNK);
    const safe = syncSafeLength(encodeHeader(FrameKind.DATA, channel, piece.length), piece);
    piece = piece.subarray(0, safe);
    frames.push([encodeHeader(FrameKind.DATA, channel, piece.length), piece]);
    rest = rest.subarray(piece.length);
  }
  return frames;
}

// ---------------------------------------------------------------------------------------------
// Exec output: DATA payload = u8 stream | u64 sequence | bytes. One sequence per command, shared by
// both streams, so the host can restore the order in which the agent read them.

export const OutputStream = { stdout: 1, stderr: 2 } as const;
export type OutputStreamName = keyof typeof OutputStream;
export const OUTPUT_HEADER_BYTES = 9;

export function encodeOutputHead(channel: number, stream: OutputStreamName, sequence: number, bytes: number): Buffer {
  const head = Buffer.allocUnsafe(HEADER_BYTES + OUTPUT_HEADER_BYTES);
  head.writeUInt32BE(OUTPUT_HEADER_BYTES + bytes + 5, 0);
  head.writeUInt8(FrameKind.DATA, 4);
  head.writeUInt32BE(channel >>> 0, 5);
  head.writeUInt8(OutputStream[stream], 9);
  head.writeUInt32BE(Math.floor(sequence / 0x100000000), 10);
  head.writeUInt32BE(sequence >>> 0, 14);
  return head;
}

export interface OutputChunk {
  stream: OutputStreamName;
  sequence: number;
  data: Buffer;
}

export function decodeOutput(payload: Buffer): OutputChunk | null {
  if (payload.length < OUTPUT_HEADER_BYTES) return null;
  const code = payload[0];
  const stream: OutputStreamName | null = code === 1 ? 'stdout' : code === 2 ? 'stderr' : null;
  if (!stream) return null;
  const sequence = payload.readUInt32BE(1) * 0x100000000 + payload.readUInt32BE(5);
  return { stream, sequence, data: payload.subarray(OUTPUT_HEADER_BYTES) };
}

// ---------------------------------------------------------------------------------------------
// Incremental decoder: accepts any chunking, resynchronises on the sync pattern.

export interface DecoderStats {
  frames: number;
  /** Bytes thrown away: stale fragments, garbage, sync padding. */
  droppedBytes: number;
  resyncs: number;
}

export class FrameDecoder {
  private buf: Buffer = EMPTY;
  /** Chunks received while waiting for a long frame, joined only once it is complete. */
  private parts: Buffer[] = [];
  private partsLength = 0;
  private need = 0;
  private scanning: boolean;
  private generation = 0;
  readonly stats: DecoderStats = { frames: 0, droppedBytes: 0, resyncs: 0 };

  constructor(
    private readonly onFrame: (frame: Frame) => void,
    private readonly maxPayload = MAX_PAYLOAD,
    scanning = false,
  ) {
    this.scanning = scanning;
  }

  /** Forget buffered bytes. scanning: drop everything up to the next sync pattern (a fresh connection). */
  reset(scanning: boolean): void {
    this.generation += 1;
    this.buf = EMPTY;
    this.parts = [];
    this.partsLength = 0;
    this.need = 0;
    this.scanning = scanning;
  }

  get buffered(): number {
    return this.buf.length + this.partsLength;
  }

  push(chunk: Buffer): void {
    if (chunk.length === 0) return;
    const held = this.buf.length + this.partsLength;
    // Fast path while a long frame trickles in: just hold the chunk, unless it carries a sync pattern.
    if (this.need > 0 && held + chunk.length < this.need && !this.patternAround(chunk)) {
      this.parts.push(chunk);
      this.partsLength += chunk.length;
      return;
    }
    if (held === 0) this.buf = chunk;
    else this.buf = Buffer.concat([this.buf, ...this.parts, chunk], held + chunk.length);
    this.parts = [];
    this.partsLength = 0;
    this.drain();
  }

  /** Is the sync pattern inside chunk or across its join with the bytes held before it? */
  private patternAround(chunk: Buffer): boolean {
    if (chunk.indexOf(SYNC_PATTERN) >= 0) return true;
    // The last pattern-length-1 bytes held, which may be spread over several small parts.
    const tail: Buffer[] = [];
    let want = SYNC_PATTERN.length - 1;
    for (let i = this.parts.length - 1; i >= -1 && want > 0; i -= 1) {
      const part = i >= 0 ? this.parts[i] : this.buf;
      const take = part.subarray(Math.max(0, part.length - want));
      tail.unshift(take);
      want -= take.length;
    }
    return Buffer.concat([...tail, chunk.subarray(0, SYNC_PATTERN.length - 1)]).indexOf(SYNC_PATTERN) >= 0;
  }

  private drain(): void {
    const b = this.buf;
    const generation = this.generation;
    let p = 0;
    this.need = 0;
    for (;;) {
      if (this.scanning) {
        const at = b.indexOf(SYNC_PATTERN, p);
        if (at < 0) {
          // Keep a tail that may be the start of a pattern split across chunks.
          const keep = Math.max(p, b.length - (SYNC_PATTERN.length - 1));
          this.stats.droppedBytes += keep - p;
          p = keep;
          break;
        }
        this.stats.droppedBytes += at - p;
        this.stats.resyncs += 1;
        p = at;
        this.scanning = false;
        continue;
      }
      const available = b.length - p;
      if (available < HEADER_BYTES) break;
      const length = b.readUInt32BE(p);
      const kind = b[p + 4];
      if (length < 5 || length - 5 > this.maxPayload || !isFrameKind(kind)) {
        this.scanning = true;
        continue;
      }
      const total = 4 + length;
      // A pattern starting inside this frame's extent: the "frame" is a stale fragment.
      const searchEnd = Math.min(b.length, p + total + SYNC_PATTERN.length - 1);
      const inner = b.subarray(p + 1, searchEnd).indexOf(SYNC_PATTERN);
      if (inner >= 0 && p + 1 + inner < p + total) {
        this.stats.droppedBytes += 1 + inner;
        this.stats.resyncs += 1;
        p += 1 + inner;
        continue;
      }
      if (available < total) {
        this.need = total; // held bytes (from this frame's start) needed before parsing again
        break;
      }
      const frame: Frame = { kind, channel: b.readUInt32BE(p + 5), payload: b.subarray(p + HEADER_BYTES, p + total) };
      p += total;
      this.stats.frames += 1;
      this.buf = b.subarray(p);
      this.onFrame(frame);
      if (generation !== this.generation) return; // the callback reset the decoder
    }
    this.buf = p === b.length ? EMPTY : b.subarray(p);
  }
}

// ---------------------------------------------------------------------------------------------
// Flow control. The receiver of a stream grants credit (WINDOW frames) as its consumer takes bytes;
// a sender never has more DATA payload bytes in flight than it was granted, so neither side ever
// buffers more than one window per channel and direction.

/** Receiving side: counts consumed bytes and says when to grant them back. */
export class CreditReceiver {
  private consumedSinceGrant = 0;

  constructor(readonly window: number) {}

  /** Returns the increment to send in a WINDOW frame now, or 0 (grants are batched to a quarter window). */
  consumed(bytes: number): number {
    this.consumedSinceGrant += bytes;
    if (this.consumedSinceGrant < this.window / 4) return 0;
    const grant = this.consumedSinceGrant;
    this.consumedSinceGrant = 0;
    return grant;
  }
}

export function clampWindow(requested: number | undefined): number {
  if (requested === undefined || !Number.isFinite(requested)) return DEFAULT_WINDOW;
  return Math.min(MAX_WINDOW, Math.max(MIN_WINDOW, Math.floor(requested)));
}

// ---------------------------------------------------------------------------------------------
// Messages

export interface RequestMessage {
  id: number;
  method: string;
  params?: unknown;
}

export interface AgentErrorBody {
  code: AgentErrorCode;
  message: string;
}

export interface ResponseMessage {
  id: number;
  result?: unknown;
  error?: AgentErrorBody;
}

export interface EventMessage {
  event: string;
  data: unknown;
}

export type AgentErrorCode =
  | 'bad_request'
  | 'unknown_method'
  | 'hello_required'
  | 'unsupported_protocol'
  | 'spawn_failed'
  | 'no_such_channel'
  | 'connect_failed'
  | 'too_many_channels'
  | 'command_failed'
  | 'internal';

// ---------------------------------------------------------------------------------------------
// Methods

export interface HelloParams {
  /** Versions the host speaks; the agent picks the highest it also speaks. */
  protocol_versions: number[];
  host_version?: string;
}
export interface HelloResult {
  protocol_version: number;
  agent_version: string;
  /** /proc/sys/kernel/random/boot_id: changes on every boot, not on a resume. */
  boot_id: string | null;
  uptime_seconds: number;
  methods: string[];
  max_payload: number;
}

export interface ReadyResult {
  ssh_listening: boolean;
  commands: true;
}

export interface ExecStartParams {
  argv: string[];
  cwd?: string | null;
  env?: Record<string, string>;
  /** 0 or absent: no timeout. */
  timeout_ms?: number;
  /** Total stdout+stderr bytes; absent: unlimited. */
  output_limit_bytes?: number;
  /** true: the host sends stdin as DATA on the channel (empty DATA = end of input). */
  stdin?: boolean;
  /** Initial credit the host grants for output. */
  window_bytes?: number;
}
export interface ExecStartResult {
  channel: number;
  pid: number;
  /** Credit the host has for stdin (0 without stdin). */
  window_bytes: number;
}
export type ExecStatus = 'exited' | 'signaled' | 'timed_out' | 'output_limit_exceeded' | 'cancelled';
export interface ExecExitEvent {
  channel: number;
  status: ExecStatus;
  /** The exit code, or 128 + signal number when a signal ended the process. */
  exit_code: number;
  signal: number | null;
  duration_ms: number;
  stdout_bytes: number;
  stderr_bytes: number;
}
export interface ExecSignalParams {
  channel: number;
  /** A name ("SIGINT") or number. Sent to the command's whole process group. */
  signal: string | number;
}
export interface ExecCancelParams {
  channel: number;
  /** SIGTERM first, SIGKILL after this many ms (default 2000). */
  grace_ms?: number;
}

export interface MetricsParams {
  /** Gap between the two CPU samples (default 200 ms). */
  sample_ms?: number;
}
export interface CapacityMetrics {
  total_mib: number;
  used_mib: number;
  available_mib: number;
}
export interface ProcessMetrics {
  pid: number;
  name: string;
  command: string;
  user: string | null;
  /** 100 = one core busy for the whole sample. */
  cpu_percent: number | null;
  memory_mib: number;
}
export interface MetricsResult {
  cpu: { cores: number; load_1: number; load_5: number; load_15: number; percent: number | null };
  memory: CapacityMetrics;
  disk: CapacityMetrics;
  uptime_seconds: number;
  processes: ProcessMetrics[];
}

export interface PersonaliseParams {
  hostname: string;
  authorized_keys: string[];
  regenerate_host_keys: boolean;
  /**
   * With regenerate_host_keys: the new host keys, made by the host (agents older than the field
   * ignore it and run ssh-keygen -A). Written to /etc/ssh/ssh_host_{ed25519,ecdsa}_key(.pub).
   */
  host_keys?: HostKeyFile[];
  /**
   * The guest continues a memory image another machine was saved from (a boot snapshot, a fork with
   * memory) rather than a boot of its own: what running programs cached of the old identity is
   * renewed too (agents older than the field ignore it).
   */
  restored?: RestoredGuest;
}
export interface RestoredGuest {
  /** The disk's size now: the root file system grows to it once the kernel sees it (the saved one was smaller). */
  disk_bytes?: number;
  /** Random bytes (base64, at most 512) mixed into the guest's entropy pool besides the generation-ID reseed. */
  entropy?: string;
}
export interface HostKeyFile {
  /** ssh-ed25519 | ecdsa-sha2-nistp256 */
  algorithm: string;
  /** OpenSSH private key file ("-----BEGIN OPENSSH PRIVATE KEY-----\n…-----END OPENSSH PRIVATE KEY-----\n"). */
  private_key: string;
  /** "algorithm base64" */
  public_key: string;
}
export interface HostKey {
  algorithm: string;
  /** "algorithm base64", without a comment. */
  public_key: string;
}
export interface PersonaliseResult {
  hostname: string;
  host_keys: HostKey[];
  /**
   * The guest's /etc/machine-id (32 hex digits), new whenever regenerate_host_keys was set; null
   * while the guest has none committed. Absent from agents older than the field.
   */
  machine_id?: string | null;
}

export interface TcpOpenParams {
  port: number;
  host?: string;
  window_bytes?: number;
}
export interface TcpOpenResult {
  channel: number;
  /** Credit the host has for bytes towards the guest port. */
  window_bytes: number;
}

export interface TimeSetParams {
  epoch_ms: number;
}
export interface TimeSetResult {
  previous_epoch_ms: number;
  epoch_ms: number;
}

export interface ShutdownParams {
  reboot: boolean;
}

export interface AgentMethods {
  hello: { params: HelloParams; result: HelloResult };
  ready: { params: Record<string, never>; result: ReadyResult };
  'exec.start': { params: ExecStartParams; result: ExecStartResult };
  'exec.signal': { params: ExecSignalParams; result: { delivered: boolean } };
  'exec.cancel': { params: ExecCancelParams; result: { accepted: boolean } };
  metrics: { params: MetricsParams; result: MetricsResult };
  personalise: { params: PersonaliseParams; result: PersonaliseResult };
  'tcp.open': { params: TcpOpenParams; result: TcpOpenResult };
  'time.set': { params: TimeSetParams; result: TimeSetResult };
  /** Flush the guest's file systems (before a disk checkpoint). */
  'fs.sync': { params: Record<string, never>; result: Record<string, never> };
  shutdown: { params: ShutdownParams; result: { accepted: true } };
}
export type AgentMethod = keyof AgentMethods;
export const AGENT_METHODS: readonly AgentMethod[] = [
  'hello',
  'ready',
  'exec.start',
  'exec.signal',
  'exec.cancel',
  'metrics',
  'personalise',
  'tcp.open',
  'time.set',
  'fs.sync',
  'shutdown',
];

export interface AgentEvents {
  /** Unsolicited, once the SSH server starts listening. */
  ready: ReadyResult;
  /** On the command's channel, after its last DATA frame. */
  'exec.exit': ExecExitEvent;
}
export type AgentEvent = keyof AgentEvents;
