/**
 * Compare a float32 result against a float64 reference with `|got - ref| <= atol + rtol * |ref|`,
 * throwing with the first mismatches printed (index, got, ref) so a failing kernel says where.
 */
export function expectClose(
  got: ArrayLike<number>,
  ref: ArrayLike<number>,
  opts: { atol?: number; rtol?: number; label?: string } = {},
): void {
  const atol = opts.atol ?? 1e-5;
  const rtol = opts.rtol ?? 1e-4;
  const label = opts.label ?? 'result';
  if (got.length !== ref.length) throw new Error(`${label}: length ${got.length} != reference ${ref.length}`);
  const bad: string[] = [];
  let count = 0;
  for (let i = 0; i < ref.length; i++) {
    const g = got[i];
    const r = ref[i];
    const ok = Number.isFinite(g) && Math.abs(g - r) <= atol + rtol * Math.abs(r);
    if (!ok) {
      count++;
      if (bad.length < 8) bad.push(`[${i}] got ${g} ref ${r} (|diff| ${Math.abs(g - r).toExponential(2)})`);
    }
  }
  if (count > 0) {
    throw new Error(
      `${label}: ${count}/${ref.length} elements outside atol ${atol} + rtol ${rtol}:\n  ${bad.join('\n  ')}`,
    );
  }
}

/**
 * Central finite differences of a scalar function `f(x)` (evaluated in float64) at `x`,
 * for the listed coordinates (all when omitted).
 */
export function finiteDifferences(
  f: (x: Float64Array) => number,
  x: ArrayLike<number>,
  opts: { eps?: number; indices?: number[] } = {},
): Float64Array {
  const eps = opts.eps ?? 1e-3;
  const xs = Float64Array.from(x);
  const grad = new Float64Array(xs.length);
  const indices = opts.indices ?? [...Array(xs.length).keys()];
  for (const i of indices) {
    const old = xs[i];
    xs[i] = old + eps;
    const plus = f(xs);
    xs[i] = old - eps;
    const minus = f(xs);
    xs[i] = old;
    grad[i] = (plus - minus) / (2 * eps);
  }
  return grad;
}
