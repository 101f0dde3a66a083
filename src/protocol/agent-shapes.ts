// The declared shapes of what a guest agent sends (see ./peer-input.ts for the rule): the JSON of
// RESPONSE and EVENT frames, each method's result and each event's data. The guest is root in a
// machine someone else controls, so nothing it says is believed before it fits here. The types in
// ./agent.ts stay the protocol's (the agent bundles that file, which uses nothing but Buffer);
// RESULT_SHAPES is typed against them, so a shape that lets through something other than the
// declared result does not compile. The guest agent does not bundle this file.
import { Type, type TSchema } from '@sinclair/typebox';
import type { AgentErrorCode, AgentEvents, AgentMethod, AgentMethods, HostKey, PersonaliseResult } from './agent';
import { MAX_WINDOW, MIN_WINDOW } from './agent';
import { peerShape, type PeerShape } from './peer-input';

/** Longest agent text passed on (error messages, through peerText): the agent's own are a line or two. */
export const MAX_AGENT_TEXT = 2000;

const Count = Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER });
/** Channel ids the agent numbers; 0 is the control channel and 0xFFFFFFFF is SYNC's. */
const Channel = Type.Integer({ minimum: 1, maximum: 0xfffffffe });
const Pid = Type.Integer({ minimum: 1, maximum: 0x3fffffff });
/** Credit the agent grants the host for a stream channel (PROTOCOL.md). */
const Window = Type.Integer({ minimum: MIN_WINDOW, maximum: MAX_WINDOW });
/** A MiB figure: 2^40 MiB is an exbibyte, beyond any disk or memory a machine has. */
const Mib = Type.Integer({ minimum: 0, maximum: 2 ** 40 });
/** Percentages and loads: finite, never negative; a machine has at most a few thousand cores. */
const Percent = (maximum: number) => Type.Number({ minimum: 0, maximum });
const Text = (maxLength: number) => Type.String({ maxLength });
const Flag = Type.Boolean();
const Closed = <T extends Record<string, TSchema>>(properties: T) => Type.Object(properties, { additionalProperties: false });

const ERROR_CODES: readonly AgentErrorCode[] = [
  'bad_request',
  'unknown_method',
  'hello_required',
  'unsupported_protocol',
  'spawn_failed',
  'no_such_channel',
  'connect_failed',
  'too_many_channels',
  'command_failed',
  'internal',
];

// --- frames ----------------------------------------------------------------------------------

/** A RESPONSE: which request it answers, and an answer that is checked against that request's method. */
export const ResponseShape = peerShape(
  'agent response',
  Type.Object({ id: Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER }), result: Type.Optional(Type.Unknown()), error: Type.Optional(Type.Unknown()) }),
);

export const AgentErrorShape = peerShape(
  'agent error',
  // The message is not bounded here but cut where it is used (peerText): an honest agent's message
  // can quote a tenant's argument of any length, which must not count against the link.
  Type.Object({ code: Type.Unsafe<AgentErrorCode>(Type.String({ enum: [...ERROR_CODES] })), message: Type.String() }),
);

/** An EVENT: its data is checked by whoever the event is for (EVENT_SHAPES). */
export const EventShape = peerShape('agent event', Type.Object({ event: Type.String({ pattern: '^[a-z][a-z0-9._-]{0,63}$' }), data: Type.Optional(Type.Unknown()) }));

// --- results -----------------------------------------------------------------------------------

const Hello = Type.Object({
  protocol_version: Type.Integer({ minimum: 1, maximum: 1000 }),
  agent_version: Text(200),
  boot_id: Type.Union([Type.String({ pattern: '^[0-9a-f-]{1,64}$' }), Type.Null()]),
  uptime_seconds: Count,
  methods: Type.Array(Text(64), { maxItems: 256 }),
  max_payload: Count,
});

const Ready = Type.Object({ ssh_listening: Flag, commands: Type.Literal(true) });

const Capacity = Closed({ total_mib: Mib, used_mib: Mib, available_mib: Mib });
/**
 * As the agent reports them (agent/src/metrics.ts): its cut of the command line is 1 KiB, a name
 * 15 bytes; a user name is whatever the guest's /etc/passwd says, so its bound is generous.
 */
const Process = Closed({
  pid: Pid,
  name: Text(4096),
  command: Text(4096),
  user: Type.Union([Text(4096), Type.Null()]),
  cpu_percent: Type.Union([Percent(100 * 4096), Type.Null()]),
  memory_mib: Mib,
});
const Metrics = Type.Object({
  cpu: Closed({
    cores: Type.Integer({ minimum: 1, maximum: 4096 }),
    load_1: Percent(1e6),
    load_5: Percent(1e6),
    load_15: Percent(1e6),
    percent: Type.Union([Percent(100), Type.Null()]),
  }),
  memory: Capacity,
  disk: Capacity,
  uptime_seconds: Count,
  processes: Type.Array(Process, { maxItems: 100 }),
});

/**
 * `host_keys` as a list of anything: each key is checked on its own (HostKeyShape), so one odd file
 * in the guest's /etc/ssh costs that key, not the machine's start.
 */
const Personalised = Type.Object({
  hostname: Text(253),
  host_keys: Type.Array(Type.Unknown(), { maxItems: 16 }),
  machine_id: Type.Optional(Type.Union([Type.String({ pattern: '^[0-9a-f]{32}$' }), Type.Null()])),
});

/**
 * A host key as the guest reports it. It becomes the line clients pin in known_hosts and the
 * machine's record, so it is one line of OpenSSH's own alphabet: a key type and base64, nothing else.
 */
export const HostKeyShape: PeerShape<HostKey> = peerShape(
  'host key',
  Type.Object({
    algorithm: Type.String({ pattern: '^[a-z0-9][a-z0-9@.-]{0,63}$' }),
    public_key: Type.String({ maxLength: 16_384, pattern: '^[a-z0-9][a-z0-9@.-]{0,63} [A-Za-z0-9+/]+={0,2}$' }),
  }),
);

const Epoch = Type.Number({ minimum: 0, maximum: 1e15 });

/** A method's result as it leaves the shape check: personalise's host keys are still each to be checked. */
export type ParsedResult<M extends AgentMethod> = M extends 'personalise'
  ? Omit<PersonaliseResult, 'host_keys'> & { host_keys: unknown[] }
  : AgentMethods[M]['result'];

/** Every method's result, checked before its caller sees it. */
export const RESULT_SHAPES: { [M in AgentMethod]: PeerShape<ParsedResult<M>> } = {
  hello: peerShape('hello result', Hello),
  ready: peerShape('ready result', Ready),
  'exec.start': peerShape('exec.start result', Type.Object({ channel: Channel, pid: Pid, window_bytes: Type.Union([Type.Literal(0), Window]) })),
  'exec.signal': peerShape('exec.signal result', Type.Object({ delivered: Flag })),
  'exec.cancel': peerShape('exec.cancel result', Type.Object({ accepted: Flag })),
  metrics: peerShape('metrics result', Metrics),
  personalise: peerShape('personalise result', Personalised),
  'tcp.open': peerShape('tcp.open result', Type.Object({ channel: Channel, window_bytes: Window })),
  'time.set': peerShape('time.set result', Type.Object({ previous_epoch_ms: Epoch, epoch_ms: Epoch })),
  'fs.sync': peerShape('fs.sync result', Type.Object({})),
  shutdown: peerShape('shutdown result', Type.Object({ accepted: Type.Literal(true) })),
};

// --- events ------------------------------------------------------------------------------------

/** exec.exit: status is one of the spec's, the exit code a shell's (0-255, 128 + signal). */
const ExecExit = Type.Object({
  channel: Channel,
  status: Type.Union([Type.Literal('exited'), Type.Literal('signaled'), Type.Literal('timed_out'), Type.Literal('output_limit_exceeded'), Type.Literal('cancelled')]),
  exit_code: Type.Integer({ minimum: 0, maximum: 255 }),
  signal: Type.Union([Type.Integer({ minimum: 1, maximum: 64 }), Type.Null()]),
  duration_ms: Count,
  stdout_bytes: Count,
  stderr_bytes: Count,
});

export const EVENT_SHAPES: { [E in keyof AgentEvents]: PeerShape<AgentEvents[E]> } = {
  ready: RESULT_SHAPES.ready,
  'exec.exit': peerShape('exec.exit event', ExecExit),
};
