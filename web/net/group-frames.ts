/**
 * The frames of the grouped allreduce (group-allreduce.ts): their kinds' meaning, and a payload that
 * describes itself, so nothing rests on the order in which a link delivers messages.
 *
 * Every payload starts with a prefix: a 32-bit checksum of everything after it, then the excluded set the
 * frame was made under (a count and that many world ranks, ascending). Values follow in the call's wire
 * format (float32, fp16 with the header's scale exponent, int8 blocks), starting 4-byte aligned. The
 * header's `chunkIndex` is the chunk's first element in the vector and `chunkCount` the vector's length,
 * so a receiver checks a chunk against its own plan of where chunks start and how long they are.
 *
 * The checksum catches a corrupted payload (a flipped byte changes one 32-bit word; every later mixing step
 * is a bijection, so the sum differs): inside a group's reduce that costs the group a retry, not a wrong sum.
 */
import { decodeFloat16Into, addFloat16Into, encodeFloat16, MAX_FINITE_SCALE_EXPONENT } from '../../core/wire/fp16';
import {
  addInt8BlocksInto,
  decodeInt8BlocksInto,
  encodeInt8Blocks,
  Int8BlockError,
  int8BlocksBytes,
} from '../../core/wire/int8-blocks';
import {
  allocateFrame,
  type CollectiveId,
  FRAME_HEADER_BYTES,
  FrameError,
  FrameKind,
  type Frame,
  PayloadEncoding,
  SCALE_EXPONENT_OFFSET,
} from './framing';
import type { WireCompression } from './ring-allreduce';

/** Bytes of the prefix with `count` excluded ranks. */
export function prefixBytes(count: number): number {
  return 8 + 4 * count;
}

export const ENCODINGS: Record<WireCompression, PayloadEncoding> = {
  none: PayloadEncoding.Float32,
  fp16: PayloadEncoding.Float16,
  int8: PayloadEncoding.Int8Blocks,
};

/** Payload bytes of `length` values in a wire format. */
export function valueBytes(length: number, compression: WireCompression): number {
  if (compression === 'int8') return int8BlocksBytes(length);
  return length * (compression === 'fp16' ? 2 : 4);
}

/** A 32-bit checksum of `bytes` (sender and receiver compute it alike). */
export function checksum32(bytes: Uint8Array): number {
  let h = 0x811c9dc5 ^ bytes.length;
  const words = bytes.length >>> 2;
  const aligned = bytes.byteOffset % 4 === 0;
  const view = aligned ? new Uint32Array(bytes.buffer, bytes.byteOffset, words) : null;
  const dv = aligned ? null : new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  for (let i = 0; i < words; i++) {
    h = Math.imul(h ^ (view ? view[i] : dv!.getUint32(4 * i, true)), 0x01000193);
    h ^= h >>> 15;
  }
  for (let i = words * 4; i < bytes.length; i++) {
    h = Math.imul(h ^ bytes[i], 0x01000193);
    h ^= h >>> 15;
  }
  return h >>> 0;
}

/** The header fields a group frame sets (its encoding follows from the values' wire format, or Bytes). */
export interface GroupHeader {
  readonly kind: FrameKind;
  readonly id: CollectiveId;
  readonly ringStep: number;
  readonly chunkIndex: number;
  readonly chunkCount: number;
}

/** A frame with the prefix and no values (seal, retry, roster). */
export function controlFrame(header: GroupHeader, excluded: readonly number[]): ArrayBuffer {
  const frame = allocateFrame(
    { ...header, encoding: PayloadEncoding.Bytes, scaleExponent: 0 },
    prefixBytes(excluded.length),
  );
  writePrefix(frame, excluded);
  return frame;
}

/**
 * A frame carrying `values` in `compression` after the prefix. `keep`, if given, receives the values as
 * the receiver will decode them (an owner keeps exactly what it sends).
 */
export function valuesFrame(
  header: GroupHeader,
  excluded: readonly number[],
  values: Float32Array,
  compression: WireCompression,
  keep?: Float32Array,
): ArrayBuffer {
  const at = FRAME_HEADER_BYTES + prefixBytes(excluded.length);
  const dataBytes = valueBytes(values.length, compression);
  const frame = allocateFrame(
    { ...header, encoding: ENCODINGS[compression], scaleExponent: 0 },
    at - FRAME_HEADER_BYTES + dataBytes,
  );
  if (compression === 'fp16') {
    // Encoded in place; the scale exponent it chose goes into the header after (as the ring's frames do).
    const halves = new Uint16Array(frame, at, values.length);
    const scaleExponent = encodeFloat16(values, halves, fp16Scratch(values.length));
    new DataView(frame).setInt8(SCALE_EXPONENT_OFFSET, scaleExponent);
    if (keep) decodeFloat16Into(halves, scaleExponent, keep);
  } else if (compression === 'int8') {
    const bytes = new Uint8Array(frame, at, dataBytes);
    encodeInt8Blocks(values, bytes);
    if (keep) decodeInt8BlocksInto(bytes, keep);
  } else {
    new Float32Array(frame, at, values.length).set(values);
    keep?.set(values);
  }
  writePrefix(frame, excluded);
  return frame;
}

/** The fp16 encoder's scaled copy, reused by every frame (encoding is synchronous) and grown as needed. */
let scratch = new Float32Array(0);
function fp16Scratch(length: number): Float32Array {
  if (scratch.length < length) scratch = new Float32Array(length);
  return scratch;
}

function writePrefix(frame: ArrayBuffer, excluded: readonly number[]): void {
  const view = new DataView(frame);
  view.setUint32(FRAME_HEADER_BYTES + 4, excluded.length, true);
  for (let i = 0; i < excluded.length; i++) view.setUint32(FRAME_HEADER_BYTES + 8 + 4 * i, excluded[i], true);
  const rest = new Uint8Array(frame, FRAME_HEADER_BYTES + 4);
  view.setUint32(FRAME_HEADER_BYTES, checksum32(rest), true);
}

/** A copy of `frame` under another header (id, step), its payload bytes unchanged: a forwarded chunk. */
export function reframe(frame: Frame, header: Pick<GroupHeader, 'id' | 'ringStep'>): ArrayBuffer {
  const copy = allocateFrame({ ...frame, ...header }, frame.payloadLength);
  new Uint8Array(copy).set(new Uint8Array(frame.buffer, FRAME_HEADER_BYTES, frame.payloadLength), FRAME_HEADER_BYTES);
  return copy;
}

/** A payload whose checksum does not match: the link corrupted it (or the sender lies). */
export class ChecksumError extends FrameError {}

/** What a group frame's prefix says, checked: the excluded ranks and where the values start. */
export interface ParsedPrefix {
  readonly excluded: number[];
  /** The values' bytes (empty for control frames). */
  readonly data: Uint8Array;
}

/** Parse and check a group frame's prefix (FrameError when malformed, ChecksumError when corrupted). */
export function parsePrefix(frame: Frame, worldSize: number): ParsedPrefix {
  if (frame.payloadLength < 8)
    throw new FrameError(`group frame of ${frame.payloadLength} payload bytes has no prefix`);
  const view = new DataView(frame.buffer, FRAME_HEADER_BYTES, frame.payloadLength);
  const rest = new Uint8Array(frame.buffer, FRAME_HEADER_BYTES + 4, frame.payloadLength - 4);
  if (checksum32(rest) !== view.getUint32(0, true)) throw new ChecksumError('group frame checksum mismatch');
  const count = view.getUint32(4, true);
  if (count > worldSize || prefixBytes(count) > frame.payloadLength)
    throw new FrameError(`group frame names ${count} excluded ranks in a world of ${worldSize}`);
  const excluded: number[] = [];
  for (let i = 0; i < count; i++) {
    const rank = view.getUint32(8 + 4 * i, true);
    if (rank >= worldSize || (i > 0 && rank <= excluded[i - 1]))
      throw new FrameError(`group frame's excluded ranks are not ascending ranks of the world: ${rank}`);
    excluded.push(rank);
  }
  const at = FRAME_HEADER_BYTES + prefixBytes(count);
  return { excluded, data: new Uint8Array(frame.buffer, at, FRAME_HEADER_BYTES + frame.payloadLength - at) };
}

/** Check that `data` holds exactly `length` values in `compression` (and, fp16, an honest scale). */
export function checkValues(frame: Frame, data: Uint8Array, length: number, compression: WireCompression): void {
  if (frame.encoding !== ENCODINGS[compression])
    throw new FrameError(`encoding ${frame.encoding}, expected ${ENCODINGS[compression]} (compression differs)`);
  if (data.byteLength !== valueBytes(length, compression))
    throw new FrameError(`chunk at ${frame.chunkIndex} carries ${data.byteLength} bytes, ${length} values expected`);
  if (compression === 'fp16' && frame.scaleExponent > MAX_FINITE_SCALE_EXPONENT)
    throw new FrameError(`fp16 scale exponent ${frame.scaleExponent} out of range`);
}

/** target = the decoded values (`add`: target += them), one float32 rounding per element. */
export function applyValues(
  frame: Frame,
  data: Uint8Array,
  target: Float32Array,
  compression: WireCompression,
  add: boolean,
): void {
  if (compression === 'int8') {
    try {
      if (add) addInt8BlocksInto(data, target);
      else decodeInt8BlocksInto(data, target);
    } catch (err) {
      if (err instanceof Int8BlockError) throw new FrameError(`chunk at ${frame.chunkIndex}: ${err.message}`);
      throw err;
    }
    return;
  }
  if (compression === 'fp16') {
    const halves = new Uint16Array(data.buffer, data.byteOffset, target.length);
    if (add) addFloat16Into(halves, frame.scaleExponent, target);
    else decodeFloat16Into(halves, frame.scaleExponent, target);
  } else {
    const values = new Float32Array(data.buffer, data.byteOffset, target.length);
    if (add) for (let i = 0; i < target.length; i++) target[i] += values[i];
    else target.set(values);
  }
  for (let i = 0; i < target.length; i++)
    if (!Number.isFinite(target[i])) throw new FrameError(`${target[i]} at [${frame.chunkIndex + i}] after this chunk`);
}

/** The wire-format round trip of `values` into `out` (what a receiver of them would hold). */
export function quantize(values: Float32Array, compression: WireCompression, out: Float32Array): void {
  if (compression === 'none') {
    out.set(values);
    return;
  }
  valuesFrame(
    { kind: FrameKind.GroupPartial, id: { round: 0, step: 0, seq: 0 }, ringStep: 0, chunkIndex: 0, chunkCount: 1 },
    [],
    values,
    compression,
    out,
  );
}
