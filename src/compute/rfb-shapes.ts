// The declared shapes of what an RFB server (QEMU's VNC server) sends, decoded from its binary
// messages before rfb-client.ts acts on them (see ../protocol/peer-input.ts for the rule). Sizes
// are bounded by the display device (DISPLAY_MAX), texts by CLIPBOARD_MAX_BYTES; relations to the
// current screen (a rectangle inside it) are checked where the screen is known.
import { Type } from '@sinclair/typebox';
import { CLIPBOARD_MAX_BYTES, DISPLAY_MAX, ScreenSize } from './machine-display';
import { peerShape } from '../protocol/peer-input';

export const ENCODING_RAW = 0;
export const ENCODING_DESKTOP_SIZE = -223;
export const ENCODING_QEMU_EXTENDED_KEY = -258;
export const ENCODING_EXTENDED_CLIPBOARD = 0xc0a1e5ce | 0;

/** Longest desktop name accepted (QEMU's is `kiste-<machine id>`). */
const MAX_NAME_BYTES = 1024;
/** A compressed Extended Clipboard message: zlib never grows text by more than a few bytes per 16 KiB. */
export const MAX_EXTENDED_CLIPBOARD_BYTES = CLIPBOARD_MAX_BYTES + 1024;

export const ServerInitShape = peerShape('RFB ServerInit', Type.Object({ ...ScreenSize.properties, nameLength: Type.Integer({ minimum: 0, maximum: MAX_NAME_BYTES }) }));
/** The rectangles of the encodings kiste asks for; which ones this client asked for is checked too. */
export const RectangleShape = peerShape(
  'RFB rectangle',
  Type.Union([
    Type.Object({
      encoding: Type.Literal(ENCODING_RAW),
      x: Type.Integer({ minimum: 0, maximum: DISPLAY_MAX.width }),
      y: Type.Integer({ minimum: 0, maximum: DISPLAY_MAX.height }),
      width: Type.Integer({ minimum: 0, maximum: DISPLAY_MAX.width }),
      height: Type.Integer({ minimum: 0, maximum: DISPLAY_MAX.height }),
    }),
    Type.Object({ encoding: Type.Literal(ENCODING_DESKTOP_SIZE), ...ScreenSize.properties }),
    Type.Object({ encoding: Type.Literal(ENCODING_QEMU_EXTENDED_KEY) }),
  ]),
);
/** ServerCutText: Latin-1 text (length >= 0) or an Extended Clipboard message (-length bytes, flags first). */
export const CutTextShape = peerShape(
  'RFB cut text',
  Type.Union([
    Type.Object({ length: Type.Integer({ minimum: 0, maximum: CLIPBOARD_MAX_BYTES }) }),
    Type.Object({ length: Type.Integer({ minimum: -MAX_EXTENDED_CLIPBOARD_BYTES, maximum: -4 }) }),
  ]),
);
/** An Extended Clipboard text, inflated: its length, then the text (NUL-terminated). */
export const ClipboardTextShape = peerShape('RFB clipboard text', Type.Object({ length: Type.Integer({ minimum: 0, maximum: CLIPBOARD_MAX_BYTES }) }));
