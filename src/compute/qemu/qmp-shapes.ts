// The declared shapes of what a QEMU says on its QMP monitor (see ../../protocol/peer-input.ts for
// the rule): the four kinds of line, and the `return` values of the commands whose answers kiste
// reads. QEMU runs jailed next to a hostile guest and may be taken over, so nothing it sends is
// believed before it fits here. Objects keep QEMU's other fields (QMP adds fields between
// versions); every string, number and list kiste reads has a bound.
import { Type, type Static } from '@sinclair/typebox';
import { peerShape } from '../../protocol/peer-input';

/** A file name as QEMU reports it: PATH_MAX, with room for QEMU's `json:{…}` pseudo-file names. */
const FileName = Type.String({ maxLength: 16_384 });
/** QEMU keeps block node names in 32 bytes (31 characters and a NUL). */
const NodeName = Type.String({ minLength: 1, maxLength: 31 });
/** Device names and qdev paths (`/machine/peripheral/disk0/virtio-backend`). */
const DeviceName = Type.String({ maxLength: 4096 });
/** QAPI enum values (run states, migration states): lower case words joined by '-'. */
const EnumValue = Type.String({ pattern: '^[a-z0-9-]{1,64}$' });
const Bytes = Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER });
/** QEMU's error texts name files and options; a few KiB is every real one. */
const Description = Type.String({ maxLength: 65_536 });
/** Our ids are `kiste-<n>`. */
const Id = Type.String({ maxLength: 64 });

const Greeting = Type.Object({
  QMP: Type.Object({
    version: Type.Object({
      qemu: Type.Object({ major: Type.Integer({ minimum: 0 }), minor: Type.Integer({ minimum: 0 }), micro: Type.Integer({ minimum: 0 }) }),
      package: Type.String({ maxLength: 1024 }),
    }),
    capabilities: Type.Array(Type.String({ maxLength: 64 }), { maxItems: 64 }),
  }),
});
const Return = Type.Object({ return: Type.Unknown(), id: Type.Optional(Id) });
const ErrorAnswer = Type.Object({
  error: Type.Object({ class: Type.String({ pattern: '^[A-Za-z]{1,64}$' }), desc: Description }),
  id: Type.Optional(Id),
});
const Event = Type.Object({
  event: Type.String({ pattern: '^[A-Z0-9_]{1,64}$' }),
  data: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  timestamp: Type.Optional(Type.Object({ seconds: Type.Integer(), microseconds: Type.Integer() })),
});

export type QmpGreeting = Static<typeof Greeting>['QMP'];
export type QmpEvent = Static<typeof Event>;

/**
 * A line is an object; which kind it is goes by the first of these keys it has (a line with
 * `return` and `error` is an error), and then it must fit that kind's shape whole.
 */
export const QmpObjectShape = peerShape('QMP line', Type.Record(Type.String(), Type.Unknown()));
export const QmpGreetingLineShape = peerShape('QMP greeting', Greeting);
export const QmpEventLineShape = peerShape('QMP event', Event);
export const QmpErrorLineShape = peerShape('QMP error', ErrorAnswer);
export const QmpReturnLineShape = peerShape('QMP answer', Return);
/** Anything that names the command it answers: a line that does not fit still settles that command. */
export const QmpAnswerIdShape = peerShape('QMP answer', Type.Object({ id: Id }));

/** `query-status` */
export const QueryStatusShape = peerShape('query-status', Type.Object({ status: EnumValue }));

/** `query-migrate` (before the first migration QEMU answers `{}`). */
export const QueryMigrateShape = peerShape('query-migrate', Type.Object({ status: Type.Optional(EnumValue), 'error-desc': Type.Optional(Description) }));

/** `query-block`: a machine has a handful of block devices. */
export const QueryBlockShape = peerShape(
  'query-block',
  Type.Array(
    Type.Object({
      device: DeviceName,
      qdev: Type.Optional(DeviceName),
      inserted: Type.Optional(Type.Object({ 'node-name': NodeName, file: FileName })),
    }),
    { maxItems: 256 },
  ),
);

const NamedBlockNode = Type.Object({
  'node-name': NodeName,
  file: FileName,
  drv: Type.String({ maxLength: 64 }),
  image: Type.Object({ 'virtual-size': Bytes, 'backing-filename': Type.Optional(FileName) }),
  'dirty-bitmaps': Type.Optional(Type.Array(Type.Object({ name: Type.String({ maxLength: 1023 }), count: Bytes }), { maxItems: 256 })),
});
export type NamedBlockNode = Static<typeof NamedBlockNode>;

/**
 * `query-named-block-nodes` with `flat: true`: two nodes (format and file) per layer of every disk.
 * Chains are compacted to a few layers; 1024 nodes is far beyond any chain kiste keeps.
 */
export const NamedBlockNodesShape = peerShape('query-named-block-nodes', Type.Array(NamedBlockNode, { maxItems: 1024 }));

/** `data` of BLOCK_JOB_COMPLETED / _CANCELLED / _READY. */
export const BlockJobEventShape = peerShape('block job event', Type.Object({ device: DeviceName, error: Type.Optional(Description) }));

/** `human-monitor-command`: the monitor's text output. */
export const HumanMonitorShape = peerShape('human-monitor-command', Type.String({ maxLength: 65_536 }));
