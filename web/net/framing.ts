/**
 * Binary frames on the data channels: a fixed 32-byte little-endian header, then the payload.
 * Control messages go over the coordinator's WebSocket as JSON; only collective data (and the tiny
 * begin/ack/abort frames of the collectives themselves) travels here, so a compact fixed header is
 * enough and keeps the payload 4-byte aligned for zero-copy `Float32Array` views.
 *
 * ```
 * offset size field
 *  0     2    magic 0x5754 ('TW')         rejects bytes that are not ours
 *  2     1    version (1)                 rejects a peer running another protocol version
 *  3     1    kind (FrameKind)
 *  4     4    id.round                    \
 *  8     4    id.step                      } which collective the frame belongs to
 * 12     4    id.seq                      /
 * 16     2    ringStep                    allreduce pipeline step (0 .. 2·(size-1)-1); grouped: see FrameKind
 * 18     1    encoding (PayloadEncoding)
 * 19     1    scaleExponent (int8)        fp16 payloads hold value·2^-scaleExponent; 0 otherwise
 * 20     4    chunkIndex
 * 24     4    chunkCount                  chunks of this segment/transfer; index < count (grouped
 *                                         allreduce: the chunk's first element, the vector's length)
 * 28     4    payloadLength (bytes)       must equal the bytes after the header
 * ```
 */
export const FRAME_MAGIC = 0x5754;
export const FRAME_VERSION = 1;
/** The header byte of `scaleExponent` (above), which an fp16 encoder sets once it has chosen it. */
export const SCALE_EXPONENT_OFFSET = 19;
// The header size and the default frame size fix the chunking, which the verifier recomputes too:
// they live with the wire formats (core/wire/ring-sum.ts explains the 16,300 bytes).
import { FRAME_HEADER_BYTES } from '../../core/wire/ring-sum';

export { DEFAULT_FRAME_BYTES, FRAME_HEADER_BYTES } from '../../core/wire/ring-sum';

export const FrameKind = {
  /** One chunk of a ring-allreduce segment at `ringStep` (reduce-scatter steps, then allgather). */
  RingChunk: 1,
  /** Broadcast header: payload = float64 total byte length, uint32 chunk size, then the root's hash as UTF-8. */
  BroadcastBegin: 2,
  /** One chunk of broadcast bytes. */
  BroadcastChunk: 3,
  /** Receiver → root: payload = 1 byte (1 = hash verified, 0 = mismatch), then the receiver's hash. */
  BroadcastAck: 4,
  /** A rank gave up on this collective: payload = UTF-8 JSON `{kind, peer, message}`. */
  Abort: 5,
  /**
   * Grouped allreduce (group-allreduce.ts, payloads in group-frames.ts): a partial sum passed along a
   * group's ring in its reduce; `ringStep` is the sender's place in the segment's chain.
   */
  GroupReduce: 6,
  /** Grouped allreduce: a member's reduce is complete; `chunkIndex` names it (flooded round the group). */
  GroupSeal: 7,
  /** Grouped allreduce: the group starts its reduce again, attempt `ringStep`, with the excluded set in the prefix. */
  GroupRetry: 8,
  /** Grouped allreduce: an owner's group and its excluded set, to the partners across groups. */
  GroupRoster: 9,
  /** Grouped allreduce: a group's partial sum of a piece, to the piece's root in another group. */
  GroupPartial: 10,
  /** Grouped allreduce: a piece's final sum, from its root to the owners and along each group's ring. */
  GroupResult: 11,
} as const;
export type FrameKind = (typeof FrameKind)[keyof typeof FrameKind];
const FRAME_KINDS = new Set<number>(Object.values(FrameKind));

export const PayloadEncoding = {
  Float32: 0,
  /** IEEE binary16 of value·2^-scaleExponent, with one power-of-two scale per frame. */
  Float16: 1,
  Bytes: 2,
  /**
   * Blocks of 256 values, each a float32 scale then one int8 per value (core/wire/int8-blocks.ts); the
   * header's scaleExponent is 0. Whole bytes here; the collective checks the length against its chunk.
   */
  Int8Blocks: 3,
} as const;
export type PayloadEncoding = (typeof PayloadEncoding)[keyof typeof PayloadEncoding];
const ELEMENT_BYTES: Record<PayloadEncoding, number> = { 0: 4, 1: 2, 2: 1, 3: 1 };

/**
 * Identifies one collective call; every rank of a ring uses the same id for the same call, and ids
 * on a link only grow (a new round, a new step, or the next call within a step), which is how late
 * frames of a failed collective are told apart from early frames of the next one.
 */
export interface CollectiveId {
  readonly round: number;
  readonly step: number;
  readonly seq: number;
}

export function collectiveKey(id: CollectiveId): string {
  return `${id.round}.${id.step}.${id.seq}`;
}

/** Lexicographic order on (round, step, seq). */
export function compareCollectiveIds(a: CollectiveId, b: CollectiveId): number {
  return a.round - b.round || a.step - b.step || a.seq - b.seq;
}

export function assertValidCollectiveId(id: CollectiveId): void {
  for (const [name, value] of [
    ['round', id.round],
    ['step', id.step],
    ['seq', id.seq],
  ] as const) {
    if (!Number.isInteger(value) || value < 0 || value > 0xffff_ffff) {
      throw new RangeError(`collective id ${name} must be an integer in [0, 2^32): got ${value}`);
    }
  }
}

export interface FrameHeader {
  readonly kind: FrameKind;
  readonly id: CollectiveId;
  readonly ringStep: number;
  readonly encoding: PayloadEncoding;
  readonly scaleExponent: number;
  readonly chunkIndex: number;
  readonly chunkCount: number;
}

export interface Frame extends FrameHeader {
  /** The whole message; the payload starts at `FRAME_HEADER_BYTES`. */
  readonly buffer: ArrayBuffer;
  readonly payloadLength: number;
}

/** A frame that does not parse: the peer speaks another protocol or the stream is corrupt. */
export class FrameError extends Error {
  override readonly name = 'FrameError';
}

/**
 * Allocate a frame with its header written and `payloadLength` zeroed payload bytes, so callers can
 * fill the payload in place (one copy from the tensor into the message, no intermediate buffers).
 */
export function allocateFrame(header: FrameHeader, payloadLength: number): ArrayBuffer {
  if (!Number.isInteger(payloadLength) || payloadLength < 0 || payloadLength > 0xffff_ffff) {
    throw new RangeError(`payload length ${payloadLength} out of range`);
  }
  if (payloadLength % ELEMENT_BYTES[header.encoding] !== 0) {
    throw new RangeError(
      `payload length ${payloadLength} is not a whole number of elements for encoding ${header.encoding}`,
    );
  }
  if (!(header.chunkIndex < header.chunkCount) && !(header.chunkCount === 0 && header.chunkIndex === 0)) {
    throw new RangeError(`chunk index ${header.chunkIndex} must be below chunk count ${header.chunkCount}`);
  }
  const buffer = new ArrayBuffer(FRAME_HEADER_BYTES + payloadLength);
  const view = new DataView(buffer);
  view.setUint16(0, FRAME_MAGIC, true);
  view.setUint8(2, FRAME_VERSION);
  view.setUint8(3, header.kind);
  view.setUint32(4, header.id.round, true);
  view.setUint32(8, header.id.step, true);
  view.setUint32(12, header.id.seq, true);
  view.setUint16(16, header.ringStep, true);
  view.setUint8(18, header.encoding);
  view.setInt8(SCALE_EXPONENT_OFFSET, header.scaleExponent);
  view.setUint32(20, header.chunkIndex, true);
  view.setUint32(24, header.chunkCount, true);
  view.setUint32(28, payloadLength, true);
  return buffer;
}

/** A frame carrying a copy of `payload`. */
export function encodeFrame(header: FrameHeader, payload: Uint8Array = new Uint8Array(0)): ArrayBuffer {
  const buffer = allocateFrame(header, payload.byteLength);
  new Uint8Array(buffer, FRAME_HEADER_BYTES).set(payload);
  return buffer;
}

/** Parse and validate a frame header; throws `FrameError` for anything malformed. */
export function decodeFrame(buffer: ArrayBuffer): Frame {
  if (!(buffer instanceof ArrayBuffer)) throw new FrameError(`frame is not an ArrayBuffer (${typeof buffer})`);
  if (buffer.byteLength < FRAME_HEADER_BYTES)
    throw new FrameError(`frame of ${buffer.byteLength} bytes is shorter than the ${FRAME_HEADER_BYTES}-byte header`);
  const view = new DataView(buffer);
  const magic = view.getUint16(0, true);
  if (magic !== FRAME_MAGIC) throw new FrameError(`bad frame magic 0x${magic.toString(16)}`);
  const version = view.getUint8(2);
  if (version !== FRAME_VERSION) throw new FrameError(`frame version ${version}, expected ${FRAME_VERSION}`);
  const kind = view.getUint8(3);
  if (!FRAME_KINDS.has(kind)) throw new FrameError(`unknown frame kind ${kind}`);
  const encoding = view.getUint8(18);
  if (!(encoding in ELEMENT_BYTES)) throw new FrameError(`unknown payload encoding ${encoding}`);
  const scaleExponent = view.getInt8(SCALE_EXPONENT_OFFSET);
  if (encoding !== PayloadEncoding.Float16 && scaleExponent !== 0)
    throw new FrameError(`scale exponent ${scaleExponent} on a non-fp16 payload`);
  const chunkIndex = view.getUint32(20, true);
  const chunkCount = view.getUint32(24, true);
  if (!(chunkIndex < chunkCount) && !(chunkCount === 0 && chunkIndex === 0)) {
    throw new FrameError(`chunk index ${chunkIndex} is not below chunk count ${chunkCount}`);
  }
  const payloadLength = view.getUint32(28, true);
  if (payloadLength !== buffer.byteLength - FRAME_HEADER_BYTES) {
    throw new FrameError(
      `payload length field ${payloadLength} != ${buffer.byteLength - FRAME_HEADER_BYTES} bytes received`,
    );
  }
  if (payloadLength % ELEMENT_BYTES[encoding as PayloadEncoding] !== 0) {
    throw new FrameError(`payload of ${payloadLength} bytes is not whole elements of encoding ${encoding}`);
  }
  return {
    kind: kind as FrameKind,
    id: { round: view.getUint32(4, true), step: view.getUint32(8, true), seq: view.getUint32(12, true) },
    ringStep: view.getUint16(16, true),
    encoding: encoding as PayloadEncoding,
    scaleExponent,
    chunkIndex,
    chunkCount,
    buffer,
    payloadLength,
  };
}

export function payloadBytes(frame: Frame): Uint8Array {
  return new Uint8Array(frame.buffer, FRAME_HEADER_BYTES, frame.payloadLength);
}

const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder('utf-8', { fatal: true });

export function encodeUtf8(text: string): Uint8Array {
  return utf8Encoder.encode(text);
}

/** Strict UTF-8 decoding: invalid bytes are a `FrameError`, not replacement characters. */
export function decodeUtf8(bytes: Uint8Array): string {
  try {
    return utf8Decoder.decode(bytes);
  } catch (err) {
    throw new FrameError(`invalid UTF-8 in frame payload: ${(err as Error).message}`);
  }
}
