/**
 * The arithmetic of local sync mode's outer step (DiLoCo, Douillard et al. 2023), plain float32 on the
 * CPU: a rank's pseudo-gradient and the outer Nesterov step. The training worker applies it
 * (web/worker/outer-step.ts) and the verifier recomputes a rank's pseudo-gradient with it, so both
 * round alike. Plain JS float64 arithmetic rounded to float32 on store gives the same bytes in every
 * engine, which the commit rule needs (every rank must report the same hash).
 *
 * - `pseudoGradient`: this rank's part of Δ = Σ_r w_r (θ_committed − θ_r), with w_r = the samples rank
 *   r consumed in the outer step / all the step's samples (`outerWeight`, outer-weights.ts). The ring
 *   allreduce sums the parts.
 * - `nesterovStep`: the outer optimizer on the summed Δ, PyTorch's SGD with `nesterov=True` and no
 *   dampening: u ← μu + Δ; θ ← θ − lr(Δ + μu). The momentum u is part of the committed state.
 */

/** (committed − local) · weight, as float32; `committed` and `local` are flat parameter buffers. */
export function pseudoGradient(committed: Float32Array, local: Float32Array, weight: number): Float32Array {
  if (committed.length !== local.length)
    throw new RangeError(`pseudoGradient: ${committed.length} committed floats, ${local.length} local`);
  if (!(weight >= 0 && weight <= 1)) throw new RangeError(`pseudoGradient: weight ${weight} outside [0, 1]`);
  const out = new Float32Array(committed.length);
  for (let i = 0; i < out.length; i++) out[i] = (committed[i] - local[i]) * weight;
  return out;
}

export interface OuterOptimizer {
  lr: number;
  momentum: number;
}

/**
 * One Nesterov step: returns the new committed parameters and momentum (fresh arrays; the inputs are
 * not modified, so a failed outer step leaves the committed state as it was).
 */
export function nesterovStep(
  committed: Float32Array,
  momentum: Float32Array,
  delta: Float32Array,
  opt: OuterOptimizer,
): { params: Float32Array; momentum: Float32Array } {
  const n = committed.length;
  if (momentum.length !== n || delta.length !== n)
    throw new RangeError(`nesterovStep: ${n} params, ${momentum.length} momentum, ${delta.length} delta floats`);
  const params = new Float32Array(n);
  const u = new Float32Array(n);
  const { lr, momentum: mu } = opt;
  for (let i = 0; i < n; i++) {
    const d = delta[i];
    if (!Number.isFinite(d)) throw new RangeError(`nesterovStep: the pseudo-gradient is not finite at ${i}`);
    u[i] = mu * momentum[i] + d;
    params[i] = committed[i] - lr * (d + mu * u[i]);
  }
  return { params, momentum: u };
}
