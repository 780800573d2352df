/**
 * Float16 wire compression for gradients: halves the bytes on the link at the cost of ~11 bits of
 * precision. Each frame carries one power-of-two scale, chosen so the frame's largest magnitude lands
 * in [2^14, 2^15): then gradients far outside binary16's range (|x| > 65504 overflows, |x| < 6e-8
 * flushes to zero) still survive, and scaling by a power of two is exact, so the only error is the
 * binary16 rounding (relative 2^-11, round-to-nearest-even).
 *
 * Written by hand rather than with `Float16Array`/`Math.f16round`: those are too new for every
 * browser the volunteer page supports, and the conversion must give the same bits everywhere.
 */

const MAX_SCALE_EXPONENT = 127;
const MIN_SCALE_EXPONENT = -128;
/**
 * The largest exponent `float16ScaleExponent` returns for a finite float32 (max < 2^128, so
 * floor(log2) − 14 ≤ 113): a frame with a larger one did not come from an honest encoder.
 */
export const MAX_FINITE_SCALE_EXPONENT = 113;

let decodeTable: Float32Array | null = null;

/** binary16 bit pattern → float value, for all 65,536 patterns (256 KiB, built on first use). */
function float16Table(): Float32Array {
  if (decodeTable) return decodeTable;
  const table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1;
    const exponent = (h >>> 10) & 0x1f;
    const mantissa = h & 0x3ff;
    let value: number;
    if (exponent === 0) value = mantissa * 2 ** -24;
    else if (exponent === 0x1f) value = mantissa ? NaN : Infinity;
    else value = (1024 + mantissa) * 2 ** (exponent - 25);
    table[h] = sign * value;
  }
  decodeTable = table;
  return table;
}

export function float16BitsToNumber(bits: number): number {
  return float16Table()[bits & 0xffff];
}

/** float32 bit pattern → nearest binary16 bit pattern (ties to even; overflow → ±Inf; NaN stays NaN). */
export function float32BitsToFloat16Bits(bits: number): number {
  const sign = (bits >>> 16) & 0x8000;
  const exponent = (bits >>> 23) & 0xff;
  const mantissa = bits & 0x7fffff;
  if (exponent === 0xff) return sign | 0x7c00 | (mantissa ? 0x200 : 0);
  const halfExponent = exponent - 112; // rebias 127 → 15
  if (halfExponent >= 0x1f) return sign | 0x7c00;
  if (halfExponent <= 0) {
    // Subnormal binary16 (or zero): |x| < 2^-25 rounds to zero (2^-25 itself ties to even zero).
    if (halfExponent < -10) return sign;
    const full = mantissa | 0x800000;
    const shift = 14 - halfExponent;
    let half = full >>> shift;
    const rest = full & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rest > halfway || (rest === halfway && half & 1)) half++;
    return sign | half;
  }
  let half = (halfExponent << 10) | (mantissa >>> 13);
  const rest = mantissa & 0x1fff;
  // A carry out of the mantissa bumps the exponent, up to 0x7c00 (Inf): the correct rounding too.
  if (rest > 0x1000 || (rest === 0x1000 && half & 1)) half++;
  return sign | half;
}

/**
 * The power-of-two exponent for a frame whose largest finite magnitude is `maxAbs`: values are sent
 * as x·2^-e with the largest in [2^14, 2^15). 0 for all-zero or non-finite frames.
 */
export function float16ScaleExponent(maxAbs: number): number {
  if (!(maxAbs > 0) || !Number.isFinite(maxAbs)) return 0;
  let e = Math.floor(Math.log2(maxAbs)) - 14;
  // log2 can be off by one ulp around powers of two: settle the bracket exactly.
  while (maxAbs * 2 ** -e >= 2 ** 15) e++;
  while (maxAbs * 2 ** -e < 2 ** 14) e--;
  return Math.max(MIN_SCALE_EXPONENT, Math.min(MAX_SCALE_EXPONENT, e));
}

/**
 * Encode `source` into `target` (same length) as binary16 of x·2^-e; returns e. `scratch` (at least
 * `source.length` floats) holds the scaled float32 values so their bits can be read in one pass.
 */
export function encodeFloat16(source: Float32Array, target: Uint16Array, scratch: Float32Array): number {
  const n = source.length;
  let maxAbs = 0;
  for (let i = 0; i < n; i++) {
    const a = Math.abs(source[i]);
    if (a > maxAbs && a !== Infinity) maxAbs = a;
  }
  const e = float16ScaleExponent(maxAbs);
  const scale = 2 ** -e;
  const scaled = scratch.subarray(0, n);
  for (let i = 0; i < n; i++) scaled[i] = source[i] * scale;
  const bits = new Uint32Array(scaled.buffer, scaled.byteOffset, n);
  for (let i = 0; i < n; i++) target[i] = float32BitsToFloat16Bits(bits[i]);
  return e;
}

/** target[i] = decode(source[i])·2^e */
export function decodeFloat16Into(source: Uint16Array, scaleExponent: number, target: Float32Array): void {
  const table = float16Table();
  const scale = 2 ** scaleExponent;
  for (let i = 0; i < source.length; i++) target[i] = table[source[i]] * scale;
}

/** target[i] += decode(source[i])·2^e (one float32 rounding per element, the same on every rank). */
export function addFloat16Into(source: Uint16Array, scaleExponent: number, target: Float32Array): void {
  const table = float16Table();
  const scale = 2 ** scaleExponent;
  for (let i = 0; i < source.length; i++) target[i] += table[source[i]] * scale;
}
