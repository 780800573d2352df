/**
 * The outer step of local sync mode (DiLoCo, Douillard et al. 2023), as plain float32 arithmetic on
 * the CPU. It runs once per outer step (every `innerSteps` steps) on a few MB, so a GPU kernel would
 * save nothing measurable, and plain JS float64 arithmetic rounded to float32 on store gives the same
 * bytes in every engine, which the commit rule needs (every rank must report the same hash).
 *
 * - `pseudoGradient`: this rank's part of Δ = Σ_r w_r (θ_committed − θ_r), with w_r = the samples rank
 *   r consumed in the outer step / all the step's samples. The ring allreduce sums the parts.
 *   (The weight rule is `outerWeight` in core/training/outer-weights.ts: the page's loop computes it.)
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

/**
 * Local sync mode's outer state inside the training worker: the momentum (part of the committed
 * state), its copy in the backup (saved and restored with the GPU backup), θ_committed of the outer
 * step in flight (read for the pseudo-gradient, used again by the Nesterov step), and this rank's own
 * parameters θ_r the outer step started from, kept until the next outer step starts: when the world
 * loses members before the outer step commits, `revert` gives them back so the survivors can take it
 * again without the lost ranks (docs/local-steps.md).
 */
export class OuterState {
  momentum: Float32Array;
  private backup: Float32Array | null = null;
  private committed: Float32Array | null = null;
  private local: Float32Array | null = null;

  constructor(
    readonly opt: OuterOptimizer,
    elements: number,
  ) {
    this.momentum = new Float32Array(elements);
  }

  saveBackup(): void {
    this.backup = this.momentum.slice();
  }

  /**
   * Keeps θ_committed of an outer step in flight: a checkpoint of the last commit taken meanwhile parks
   * the live state, restores the backup and puts the live state back (web/elastic/checkpoint-service.ts),
   * and the backup's parameters, from which it was read, do not change until the outer step commits.
   */
  restoreBackup(): void {
    if (this.backup) this.momentum = this.backup.slice();
  }

  /** A snapshot's momentum (a checkpoint, a broadcast from the state's holder). */
  load(momentum: Float32Array): void {
    if (momentum.length !== this.momentum.length)
      throw new RangeError(`outer momentum of ${momentum.length} floats, the model has ${this.momentum.length}`);
    this.momentum = momentum.slice();
  }

  /** This rank's pseudo-gradient part; remembers `committed` for `step`, and `local` for `revert`. */
  pseudoGradient(committed: Float32Array, local: Float32Array, weight: number): Float32Array {
    this.committed = committed;
    this.local = local;
    return pseudoGradient(committed, local, weight);
  }

  /**
   * Undo the last Nesterov step (it never committed): the momentum goes back to the backup's (the
   * committed one: it changes only at outer steps), and the parameters to return are this rank's own
   * ones the outer step started from. Throws when no outer step started since the model was built.
   */
  revert(): Float32Array {
    if (!this.local || !this.backup) throw new Error('revertOuter: no outer step to undo');
    this.momentum = this.backup.slice();
    this.committed = null;
    return this.local.slice();
  }

  /** The Nesterov step with the allreduced pseudo-gradient: the new committed parameters (momentum kept here). */
  step(delta: Float32Array): Float32Array {
    if (!this.committed) throw new Error('outer step without a pseudo-gradient of this outer step');
    const next = nesterovStep(this.committed, this.momentum, delta, this.opt);
    this.momentum = next.momentum;
    this.committed = null;
    return next.params;
  }
}
