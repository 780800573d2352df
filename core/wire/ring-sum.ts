/**
 * The ring allreduce's sum as arithmetic alone: what every rank of web/net/ring-allreduce.ts ends with,
 * computed from the ranks' inputs without links, frames or timing. The verifier uses it to apply the
 * very bytes the tabs applied (the owner of each segment adds the chain in ring order and, with a
 * compressed wire, keeps the decoded value of what it sends), so its recomputed step is compared with
 * the tabs' within GPU rounding, not within the codec's. A unit test runs it against the real ring on
 * memory links, bit for bit, for every wire.
 *
 * Also the geometry both share (the frame size fixes the chunking, and a chunk is where an fp16 scale
 * or an int8 block starts), and `int8Slack`: per value, the most an int8 encode can move it, read from
 * the decoded values themselves, which the coordinator's hop checks allow per bucket
 * (core/state/sketch.ts `checkHops`).
 */
import { ringSegmentStart as segmentStart } from '../state/sketch';
import { decodeFloat16Into, encodeFloat16 } from './fp16';
import {
  decodeInt8BlocksInto,
  encodeInt8Blocks,
  INT8_BLOCK_VALUES,
  INT8_SCALE_BYTES,
  int8BlocksBytes,
} from './int8-blocks';

/** Wire format of the ring allreduce (the job file's `sync.compression`). */
export type WireCompression = 'none' | 'fp16' | 'int8';

/** Bytes of a collective frame's header (web/net/framing.ts documents the fields). */
export const FRAME_HEADER_BYTES = 32;

/**
 * Frame size the collectives cut their data into by default: 16,300 bytes, the size every browser
 * accepts (PeerJS's `chunkedMTU`). Chromium also takes 64 KiB (up to 256 KiB) messages, but between
 * tabs here 16,300- and 65,536-byte frames gave the same raw and allreduce throughput within the run
 * noise (web/net/README.md): the JS side (frame handling, adds) is under 10% of a tab's main thread,
 * SCTP cuts messages into ~1.2 KB packets whatever their size, so the per-message cost is not what
 * limits. The portable size wins.
 */
export const DEFAULT_FRAME_BYTES = 16_300;

/** Values that fill a frame of `frameBytes` in this wire format (int8: whole blocks of 256 with their scales). */
export function chunkElementsFor(frameBytes: number, compression: WireCompression): number {
  const payload = frameBytes - FRAME_HEADER_BYTES;
  if (compression === 'int8') return Math.floor(payload / (INT8_BLOCK_VALUES + INT8_SCALE_BYTES)) * INT8_BLOCK_VALUES;
  return Math.floor(payload / (compression === 'fp16' ? 2 : 4));
}

/** Float32 values per default frame; fp16 uses the same count (its frames half full). */
export const DEFAULT_CHUNK_ELEMENTS = chunkElementsFor(DEFAULT_FRAME_BYTES, 'none');
/** 62 blocks of 256 (15,872 values, 16,120 payload bytes): int8 frames as full as float32's. */
export const DEFAULT_INT8_CHUNK_ELEMENTS = chunkElementsFor(DEFAULT_FRAME_BYTES, 'int8');

/** The default chunking of a wire format. */
export function defaultChunkElements(compression: WireCompression): number {
  return compression === 'int8' ? DEFAULT_INT8_CHUNK_ELEMENTS : DEFAULT_CHUNK_ELEMENTS;
}

/**
 * `target` ← the values a receiver decodes from `source` sent in this wire format, chunk by chunk from
 * `start` (a segment's first element): float32 as is; fp16 with one scale per chunk; int8 in blocks of
 * 256 from each chunk's start. `target` and `source` may be the same array.
 */
export function wireRoundTrip(
  source: Float32Array,
  target: Float32Array,
  compression: WireCompression,
  chunkElements = defaultChunkElements(compression),
): void {
  if (compression === 'none') {
    if (target !== source) target.set(source);
    return;
  }
  const scratch = new Float32Array(chunkElements);
  const halves = new Uint16Array(chunkElements);
  const bytes = new Uint8Array(int8BlocksBytes(chunkElements));
  for (let at = 0; at < source.length; at += chunkElements) {
    const values = source.subarray(at, Math.min(source.length, at + chunkElements));
    const out = target.subarray(at, at + values.length);
    if (compression === 'fp16') {
      const e = encodeFloat16(values, halves.subarray(0, values.length), scratch);
      decodeFloat16Into(halves.subarray(0, values.length), e, out);
    } else {
      const b = bytes.subarray(0, int8BlocksBytes(values.length));
      encodeInt8Blocks(values, b);
      decodeInt8BlocksInto(b, out);
    }
  }
}

/**
 * The sum every rank holds after `ringAllreduce` of `inputs` (one vector per rank, in rank order):
 * segment s starts its chain at rank s; each hop decodes what the previous rank sent and adds its own
 * float32 values (one rounding); the owner (rank s − 1) ends the chain and, with a compressed wire,
 * keeps the decoded value of what it then sends. Throws on what the ring refuses (a value an encoder
 * refuses: NaN, ±Infinity, int8 beyond ±2^127).
 */
export function ringSum(
  inputs: readonly Float32Array[],
  compression: WireCompression,
  chunkElements = defaultChunkElements(compression),
): Float32Array {
  const size = inputs.length;
  const n = inputs[0]?.length ?? 0;
  if (size < 1 || inputs.some((x) => x.length !== n))
    throw new RangeError('ringSum: one vector of one length per rank');
  if (size === 1) return inputs[0].slice();
  const out = new Float32Array(n);
  for (let s = 0; s < size; s++) {
    const start = segmentStart(s, n, size);
    const end = segmentStart(s + 1, n, size);
    const partial = inputs[s].slice(start, end);
    for (let g = 1; g < size; g++) {
      wireRoundTrip(partial, partial, compression, chunkElements);
      const own = inputs[(s + g) % size].subarray(start, end);
      for (let i = 0; i < partial.length; i++) partial[i] += own[i];
    }
    wireRoundTrip(partial, partial, compression, chunkElements);
    out.set(partial, start);
  }
  return out;
}

/**
 * Per value of `decoded` (what int8 blocks of a ring of `size` decode to, laid out as the ring sends
 * them: chunks from each segment's start, blocks of 256 from each chunk's start), half its block's
 * step, max|block| / 254, times (1 + 2^-20): at least how far the encode that produced it can have moved
 * the value (the block's scale is max|x|/127 rounded to float32, and the decoded maximum is 127 times
 * it, so a hostile sender cannot make the step larger without sending a larger value).
 */
export function int8Slack(
  decoded: Float32Array,
  size: number,
  chunkElements = DEFAULT_INT8_CHUNK_ELEMENTS,
): Float32Array {
  const n = decoded.length;
  const slack = new Float32Array(n);
  for (let s = 0; s < size; s++) {
    const end = segmentStart(s + 1, n, size);
    for (let chunk = segmentStart(s, n, size); chunk < end; chunk += chunkElements) {
      const chunkEnd = Math.min(end, chunk + chunkElements);
      for (let block = chunk; block < chunkEnd; block += INT8_BLOCK_VALUES) {
        const blockEnd = Math.min(chunkEnd, block + INT8_BLOCK_VALUES);
        let max = 0;
        for (let i = block; i < blockEnd; i++) max = Math.max(max, Math.abs(decoded[i]));
        slack.fill((max / 254) * (1 + 2 ** -20), block, blockEnd);
      }
    }
  }
  return slack;
}
