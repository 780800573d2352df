/**
 * Int8 wire compression in blocks: about a quarter of float32's bytes, for pseudo-gradients (the
 * local-steps outer step), where a relative error of ~1/254 of each block's largest value is far
 * below the noise of H inner steps (INTELLECT-1 trained with such an int8 allreduce).
 *
 * Format of `length` values: blocks of `INT8_BLOCK_VALUES` (256) consecutive values, the last one
 * shorter when `length` is not a multiple. Each block is
 *
 * ```
 * offset size
 *  0     4    scale: float32, little-endian: max|x| / 127 rounded to float32, +0 for a zero block
 *  4     k    k int8 values q = round(x / scale), in [-127, 127] (−128 never appears)
 * ```
 *
 * so a full block takes 260 bytes (scales stay 4-byte aligned) and `length` values take
 * `length + 4·ceil(length / 256)` bytes (`int8BlocksBytes`). A value decodes to `fround(q · scale)`.
 *
 * Error bound: |x − decode(encode(x))| ≤ scale/2 + 2^-24·|decode| per block (the rounding to an
 * integer, then the float32 rounding of q·scale), with two deliberate exceptions at the ends of the
 * float32 range:
 * - A block whose largest magnitude is below `INT8_MIN_BLOCK_MAX` (127·2^-126 ≈ 1.5e-36) is sent as a
 *   zero block: its scale would be a float32 subnormal, whose few bits of precision break the bound
 *   (and such values are zero for any training purpose). The error there is < 1.5e-36.
 * - Values beyond ±`INT8_MAX_ABS` (2^127 ≈ 1.7e38, half the float32 range) are refused, like NaN and
 *   ±Infinity: 127·scale must stay finite, and a sum that large is a bug or an attack, not a gradient.
 *
 * Deterministic: every step is an IEEE-754 operation JavaScript defines exactly (a float32 widened
 * to float64 is exact; `x / scale` is one correctly rounded float64 division; `Math.round` rounds to
 * the nearest integer with ties toward +∞, e.g. round(−2.5) = −2; `Math.fround` and stores into a
 * `Float32Array` round to nearest-even; q·scale is exact in float64), and the scale is written with
 * an explicit byte order, so the same input gives the same bytes in every engine.
 *
 * Decoding refuses what the encoder never produces: a non-finite, negative, −0 or out-of-range scale,
 * a −128, a zero block with a nonzero value, a nonzero scale without a ±127 (the block's largest value
 * always encodes to ±127). A hostile sender can still send any value the format can express; this
 * only keeps the bytes canonical and the decoded values finite.
 */

/** Values per block; the last block of a run may be shorter. */
export const INT8_BLOCK_VALUES = 256;
/** Bytes of one block's float32 scale. */
export const INT8_SCALE_BYTES = 4;
/** Largest magnitude the codec encodes: 2^127 (so 127·scale stays well inside float32). */
export const INT8_MAX_ABS = 2 ** 127;
/** A block whose largest magnitude is below this is sent as zeros (its scale would be subnormal). */
export const INT8_MIN_BLOCK_MAX = 127 * 2 ** -126;
const MIN_SCALE = 2 ** -126;
const MAX_SCALE = Math.fround(INT8_MAX_ABS / 127);

/** Input the codec refuses: a value that must not go on the wire, or bytes that are not this format. */
export class Int8BlockError extends RangeError {
  override readonly name = 'Int8BlockError';
}

/** Payload bytes for `length` values: one byte each plus a 4-byte scale per (started) block. */
export function int8BlocksBytes(length: number): number {
  return length + INT8_SCALE_BYTES * Math.ceil(length / INT8_BLOCK_VALUES);
}

/**
 * Index of the first value the codec refuses to encode (NaN, ±Infinity, |x| > 2^127), or −1. Lets a
 * caller refuse a whole vector before any of it is sent.
 */
export function firstUnencodable(values: Float32Array): number {
  for (let i = 0; i < values.length; i++) {
    const a = Math.abs(values[i]);
    // `!(a <= max)` is also true for NaN.
    if (!(a <= INT8_MAX_ABS)) return i;
  }
  return -1;
}

function describeUnencodable(values: Float32Array, i: number): string {
  const x = values[i];
  return Number.isFinite(x)
    ? `value ${x} at [${i}] exceeds the int8 codec's range ±2^127`
    : `value ${x} at [${i}] is not finite; refusing to encode it`;
}

const BLOCK_BYTES = INT8_SCALE_BYTES + INT8_BLOCK_VALUES;

function views(bytes: Uint8Array): { scales: DataView; values: Int8Array } {
  return {
    scales: new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength),
    values: new Int8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength),
  };
}

function checkSize(bytes: Uint8Array, length: number): void {
  const want = int8BlocksBytes(length);
  if (bytes.byteLength !== want) {
    throw new Int8BlockError(`int8 blocks of ${length} values take ${want} bytes, got ${bytes.byteLength}`);
  }
}

/** Calls `visit` for each block of `n` values: value i of block b sits at byte i + shift, shift = 4·(b + 1). */
function forEachBlock(n: number, visit: (b: number, start: number, end: number, shift: number) => void): void {
  for (let b = 0, start = 0; start < n; b++, start += INT8_BLOCK_VALUES) {
    visit(b, start, Math.min(n, start + INT8_BLOCK_VALUES), INT8_SCALE_BYTES * (b + 1));
  }
}

/**
 * Encode `source` into `target` (exactly `int8BlocksBytes(source.length)` bytes). Throws
 * `Int8BlockError`, writing nothing, if any value is NaN, ±Infinity or beyond ±2^127.
 */
export function encodeInt8Blocks(source: Float32Array, target: Uint8Array): void {
  checkSize(target, source.length);
  // First pass: each block's largest magnitude, refusing an unencodable value before anything is written.
  const maxima = new Float64Array(Math.ceil(source.length / INT8_BLOCK_VALUES));
  forEachBlock(source.length, (b, start, end) => {
    let maxAbs = 0;
    for (let i = start; i < end; i++) {
      const a = Math.abs(source[i]);
      // `!(a <= max)` is also true for NaN.
      if (!(a <= INT8_MAX_ABS)) throw new Int8BlockError(describeUnencodable(source, i));
      if (a > maxAbs) maxAbs = a;
    }
    maxima[b] = maxAbs;
  });
  const { scales, values } = views(target);
  forEachBlock(source.length, (b, start, end, shift) => {
    const maxAbs = maxima[b];
    // maxAbs ≥ 127·2^-126 makes the scale a normal float32 (≥ 2^-126), with 24 bits of precision.
    const scale = maxAbs < INT8_MIN_BLOCK_MAX ? 0 : Math.fround(maxAbs / 127);
    scales.setFloat32(b * BLOCK_BYTES, scale, true);
    if (scale === 0) values.fill(0, start + shift, end + shift);
    else
      for (let i = start; i < end; i++) {
        // |x|/scale ≤ 127·(1 + 2^-23) rounds to at most 127: the clamp is a guard, never reached.
        values[i + shift] = Math.min(127, Math.max(-127, Math.round(source[i] / scale)));
      }
  });
}

/** The scale of each block of `source` (bytes for `length` values), after checking every block. */
function checkedScales(source: Uint8Array, length: number): Float32Array {
  checkSize(source, length);
  const { scales, values } = views(source);
  const out = new Float32Array(Math.ceil(length / INT8_BLOCK_VALUES));
  forEachBlock(length, (b, start, end, shift) => {
    const scale = scales.getFloat32(b * BLOCK_BYTES, true);
    if (!(scale === 0 && !Object.is(scale, -0)) && !(scale >= MIN_SCALE && scale <= MAX_SCALE)) {
      throw new Int8BlockError(`int8 block ${b}: scale ${scale} is neither +0 nor in [2^-126, 2^127/127]`);
    }
    let maxAbs = 0;
    for (let i = start + shift; i < end + shift; i++) {
      const a = Math.abs(values[i]);
      if (a > maxAbs) maxAbs = a;
    }
    if (maxAbs > 127) throw new Int8BlockError(`int8 block ${b}: holds −128, outside [−127, 127]`);
    if (scale === 0 ? maxAbs !== 0 : maxAbs !== 127) {
      throw new Int8BlockError(
        `int8 block ${b}: scale ${scale} with largest |q| ${maxAbs} (a zero block holds only zeros, any other a ±127)`,
      );
    }
    out[b] = scale;
  });
  return out;
}

/**
 * target[i] = fround(q_i · scale): decode `source` into `target` (whose length says how many values).
 * Throws `Int8BlockError`, changing nothing, on bytes the encoder would not produce.
 */
export function decodeInt8BlocksInto(source: Uint8Array, target: Float32Array): void {
  const scales = checkedScales(source, target.length);
  const { values } = views(source);
  forEachBlock(target.length, (b, start, end, shift) => {
    const scale = scales[b];
    for (let i = start; i < end; i++) target[i] = values[i + shift] * scale; // exact product, one rounding
  });
}

/**
 * target[i] = fround(target[i] + fround(q_i · scale)): the float32 sum of `target` and the decoded
 * values (a float64 add of two float32s rounded once to float32 is the float32 add), the same on every
 * rank. Throws `Int8BlockError`, changing nothing, on malformed bytes or if a sum would leave ±2^127
 * (it could not be encoded again): the sums are checked in a first pass and written in a second.
 */
export function addInt8BlocksInto(source: Uint8Array, target: Float32Array): void {
  const scales = checkedScales(source, target.length);
  const { values } = views(source);
  forEachBlock(target.length, (b, start, end, shift) => {
    const scale = scales[b];
    for (let i = start; i < end; i++) {
      const sum = Math.fround(target[i] + Math.fround(values[i + shift] * scale));
      if (!(Math.abs(sum) <= INT8_MAX_ABS)) {
        throw new Int8BlockError(`sum ${sum} at [${i}] (${target[i]} + a received value) leaves ±2^127`);
      }
    }
  });
  forEachBlock(target.length, (b, start, end, shift) => {
    const scale = scales[b];
    for (let i = start; i < end; i++) target[i] += Math.fround(values[i + shift] * scale);
  });
}
