/**
 * Overlapped outer steps inside the training worker (local sync mode with `sync.overlap`;
 * docs/local-steps.md "Overlapped outer steps"), as plain float32 arithmetic on the CPU like the outer
 * step it extends (outer-step.ts): an eager update after Kale et al. 2025, anchored at the consensus.
 *
 * - The **consensus** C with the committed outer momentum u: the Nesterov steps of the allreduced sums
 *   Δ̄_k, one per outer step, in order. It is the committed state every rank agrees on (its hash is
 *   reported), what checkpoints and joiners get.
 * - This rank's **start** θ_m: where its current inner phase started. At the end of an overlapped outer
 *   step k (C_{k−1} committed, Δ̄_k not known yet) the rank measures its progress against the midpoint
 *   of the consensus and its start, p = (C_{k−1} + θ_m)/2 − θ_end, puts s_k = w·p into the allreduce,
 *   and starts its next inner phase at once from Nesterov(C_{k−1}, u_{k−1}, p): the consensus step it
 *   would take if every rank had made its progress. The w-weighted mean of the ranks' starts is then
 *   the consensus C_k (the step is linear in p and Σ w·p = Δ̄_k), so in the mean the ranks train from
 *   C_k as in DiLoCo; each rank is off by its own progress's deviation, which the midpoint reference
 *   damps (by lr·(1+μ)·|α − ½| per outer step, α the share of the distance its inner phase covers).
 *   With one rank this is DiLoCo exactly.
 *
 * Why not Kale et al.'s proxy (the last sum with this rank's stale part swapped for its fresh one) on
 * a per-rank Nesterov chain, as this file did first: two thirds of that update were one outer step
 * late, and a one-step-delayed Nesterov loop at lr 0.7, μ 0.9 diverges; bench/overlap-rules.ts measured
 * it, and the alternatives, against DiLoCo (bench/RESULTS.md, issue 24).
 *
 * A synchronous outer step (the epoch's end, a drained or carried group) brings every rank back to the
 * consensus: θ_m := C (its `commit`, and `reset`).
 */
import { nesterovStep, type OuterOptimizer } from './outer-step';

/** An outer step computed and not yet committed: the consensus and momentum it leads to. */
interface Pending {
  params: Float32Array;
  momentum: Float32Array;
  /** A synchronous outer step: its commit also moves this rank's start to the consensus. */
  sync: boolean;
}

export class EagerOuter {
  /** θ_m: where this rank's current inner phase started. */
  private start: Float32Array;
  /** C: the committed consensus parameters. */
  private consensus: Float32Array;
  /** u: the committed outer momentum (the consensus's). */
  private momentum: Float32Array;
  /** The last outer step's progress p = (C + θ_m)/2 − θ_end, unweighted (a carried round weighs it anew), or null. */
  private progress: Float32Array | null = null;
  /** The next consensus, computed from an allreduced sum and not yet committed. */
  private pending: Pending | null = null;
  /** The live parameters before a synchronous outer step wrote the consensus over them (`revert`). */
  private local: Float32Array | null = null;

  constructor(
    readonly opt: OuterOptimizer,
    committed: Float32Array,
    momentum: Float32Array,
  ) {
    this.start = committed.slice();
    this.consensus = committed.slice();
    this.momentum = momentum.slice();
  }

  /** A fresh start from the committed state (a round's start, a restore): this rank starts at the consensus. */
  reset(committed: Float32Array, momentum: Float32Array): void {
    this.check(committed, 'reset');
    this.start = committed.slice();
    this.consensus = committed.slice();
    this.momentum = momentum.slice();
    this.progress = null;
    this.pending = null;
    this.local = null;
  }

  /**
   * The end of an overlapped outer step's inner phase, with the live parameters `live`: this rank's
   * contribution w·p (returned, for the allreduce), and the eager step Nesterov(C, u, p). Returns the
   * parameters the next inner phase starts from. The previous overlapped outer step must be committed.
   */
  eager(live: Float32Array, weight: number): { params: Float32Array; contribution: Float32Array } {
    if (this.pending) throw new Error('eagerOuter: the previous outer step is not committed');
    const contribution = this.weigh(live, weight);
    const progress = this.progress as Float32Array;
    this.start = nesterovStep(this.consensus, this.momentum, progress, this.opt).params;
    return { params: this.start.slice(), contribution: contribution.slice() };
  }

  /** The last outer step's contribution weighed anew (a carried round: the survivors' weights). */
  reweigh(weight: number): Float32Array {
    if (!this.progress) throw new Error('outerContribution: no outer step to weigh');
    return weighted(this.progress, weight);
  }

  /** A synchronous outer step's contribution w·p, measured as the eager step's; `live` is kept for `revert`. */
  syncContribution(live: Float32Array, weight: number): Float32Array {
    this.local = live.slice();
    return this.weigh(live, weight);
  }

  /**
   * The Nesterov step of the consensus with the allreduced `sum` from the committed momentum `momentum`:
   * the next committed state, kept as pending until `commit` (or `commitSync` for a synchronous one).
   */
  consensusStep(sum: Float32Array, momentum: Float32Array, sync: boolean): Pending {
    const next = nesterovStep(this.consensus, momentum, sum, this.opt);
    this.pending = { params: next.params, momentum: next.momentum, sync };
    return this.pending;
  }

  /** The pending consensus, once committed (an overlapped outer step): the state to keep as committed. */
  commit(): { params: Float32Array; momentum: Float32Array } {
    const p = this.pending;
    if (!p) throw new Error('commitConsensus: no outer step to commit');
    this.consensus = p.params;
    this.momentum = p.momentum;
    this.pending = null;
    if (p.sync) this.backToConsensus(p);
    return { params: p.params.slice(), momentum: p.momentum.slice() };
  }

  /** Whether a synchronous outer step waits for its commit (the backup saved after it commits it). */
  get syncPending(): boolean {
    return this.pending?.sync === true;
  }

  /** Drop a pending outer step (it never committed); returns the live parameters a synchronous one replaced, if any. */
  revert(): Float32Array | null {
    this.pending = null;
    const local = this.local;
    this.local = null;
    return local;
  }

  /** The committed consensus parameters. */
  get committed(): Float32Array {
    return this.consensus;
  }

  /** After a synchronous outer step: this rank starts at the consensus. */
  private backToConsensus(p: Pending): void {
    this.start = p.params.slice();
    this.progress = null;
    this.local = null;
  }

  /**
   * w·p with p = (C + θ_m)/2 − live, each value rounded to float32 once (so with θ_m = C it is the
   * pseudo-gradient of outer-step.ts bit for bit); remembers p.
   */
  private weigh(live: Float32Array, weight: number): Float32Array {
    this.check(live, 'contribution');
    if (!(weight >= 0 && weight <= 1)) throw new RangeError(`outer contribution: weight ${weight} outside [0, 1]`);
    const p = new Float32Array(live.length);
    for (let i = 0; i < p.length; i++) p[i] = 0.5 * (this.consensus[i] + this.start[i]) - live[i];
    this.progress = p;
    return weighted(p, weight);
  }

  private check(values: Float32Array, what: string): void {
    if (values.length !== this.start.length)
      throw new RangeError(`${what}: ${values.length} floats, the model has ${this.start.length}`);
  }
}

/** progress · weight, rounded to float32 (with weight 1, the progress itself). */
function weighted(progress: Float32Array, weight: number): Float32Array {
  const out = new Float32Array(progress.length);
  for (let i = 0; i < out.length; i++) out[i] = progress[i] * weight;
  return out;
}
