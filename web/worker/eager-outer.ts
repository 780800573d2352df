/**
 * Overlapped outer steps inside the training worker (local sync mode with `sync.overlap`;
 * docs/local-steps.md "Overlapped outer steps"), as plain float32 arithmetic on the CPU like the outer
 * step it extends (outer-step.ts): "eager" one-step-delayed updates after Kale et al. 2025.
 *
 * Two states move side by side:
 * - the **consensus** C with the committed outer momentum u (outer-step.ts `OuterState.momentum`): the
 *   Nesterov steps of the allreduced sums Δ̄_k, one per outer step, in order. It is the committed state
 *   every rank agrees on (its hash is reported), what checkpoints and joiners get;
 * - this rank's **own** outer state: θ_m (the parameters its current inner phase started from) and its
 *   own momentum u_m. At the end of an overlapped outer step k, before Δ̄_k is known, the rank takes an
 *   eager Nesterov step with g = Δ̄_{k−1} − s_{k−1} + s_k: the previous outer step's sum with its own
 *   stale part s_{k−1} replaced by its fresh one s_k = w·(θ_m − θ_end). Its next inner phase starts
 *   there. Every rank's own contribution counts at once, the others' one outer step late; with one rank
 *   this is DiLoCo exactly.
 *
 * A synchronous outer step (the epoch's end, a drained or carried group) brings every rank back to the
 * consensus: θ_m := C, u_m := u, and the stale terms restart from zero (its `commit`, and `reset`).
 */
import { nesterovStep, type OuterOptimizer, pseudoGradient } from './outer-step';

/** An outer step computed and not yet committed: the consensus and momentum it leads to, and the sum it took. */
interface Pending {
  params: Float32Array;
  momentum: Float32Array;
  sum: Float32Array;
  /** A synchronous outer step: its commit also moves this rank's own state to the consensus. */
  sync: boolean;
}

export class EagerOuter {
  /** θ_m: where this rank's current inner phase started. */
  private start: Float32Array;
  /** u_m: this rank's own outer momentum. */
  private ownMomentum: Float32Array;
  /** s: what this rank put into the last outer allreduce (w · progress), zeros after a synchronous one. */
  private sent: Float32Array;
  /** The last outer step's progress θ_m − θ_end, unweighted (a carried round weighs it anew), or null. */
  private progress: Float32Array | null = null;
  /** Δ̄ of the last committed overlapped outer step; zeros after a synchronous one or a fresh start. */
  private lastSum: Float32Array;
  /** C: the committed consensus parameters. */
  private consensus: Float32Array;
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
    this.ownMomentum = momentum.slice();
    this.sent = new Float32Array(committed.length);
    this.lastSum = new Float32Array(committed.length);
  }

  /** A fresh start from the committed state (a round's start, a restore): this rank's own state is the consensus. */
  reset(committed: Float32Array, momentum: Float32Array): void {
    this.check(committed, 'reset');
    this.start = committed.slice();
    this.consensus = committed.slice();
    this.ownMomentum = momentum.slice();
    this.sent = new Float32Array(committed.length);
    this.lastSum = new Float32Array(committed.length);
    this.progress = null;
    this.pending = null;
    this.local = null;
  }

  /**
   * The end of an overlapped outer step's inner phase, with the live parameters `live`: this rank's
   * contribution w·(θ_m − live) (returned, for the allreduce), and the eager step. Returns the
   * parameters the next inner phase starts from. The previous overlapped outer step must be committed.
   */
  eager(live: Float32Array, weight: number): { params: Float32Array; contribution: Float32Array } {
    if (this.pending) throw new Error('eagerOuter: the previous outer step is not committed');
    const contribution = this.weigh(live, weight);
    const g = new Float32Array(contribution.length);
    for (let i = 0; i < g.length; i++) g[i] = this.lastSum[i] - this.sent[i] + contribution[i];
    const next = nesterovStep(this.start, this.ownMomentum, g, this.opt);
    this.start = next.params;
    this.ownMomentum = next.momentum;
    this.sent = contribution;
    return { params: this.start.slice(), contribution: contribution.slice() };
  }

  /**
   * The last outer step's contribution weighed anew (a carried round: the survivors' weights), which
   * then replaces the stale term of the next eager step.
   */
  reweigh(weight: number): Float32Array {
    if (!this.progress) throw new Error('outerContribution: no outer step to weigh');
    const out = new Float32Array(this.progress.length);
    for (let i = 0; i < out.length; i++) out[i] = this.progress[i] * weight;
    this.sent = out;
    return out.slice();
  }

  /** A synchronous outer step's contribution w·(θ_m − live); `live` is kept for `revert`. */
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
    this.pending = { params: next.params, momentum: next.momentum, sum: sum.slice(), sync };
    return this.pending;
  }

  /** The pending consensus, once committed (an overlapped outer step): the state to keep as committed. */
  commit(): { params: Float32Array; momentum: Float32Array } {
    const p = this.pending;
    if (!p) throw new Error('commitConsensus: no outer step to commit');
    this.consensus = p.params;
    this.lastSum = p.sum;
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

  /** After a synchronous outer step: this rank's own state is the consensus, no stale terms. */
  private backToConsensus(p: Pending): void {
    this.start = p.params.slice();
    this.ownMomentum = p.momentum.slice();
    this.sent = new Float32Array(p.params.length);
    this.lastSum = new Float32Array(p.params.length);
    this.progress = null;
    this.local = null;
  }

  /** w·(θ_m − live): the pseudo-gradient (outer-step.ts), so the same rounding; remembers the progress. */
  private weigh(live: Float32Array, weight: number): Float32Array {
    this.check(live, 'contribution');
    if (!(weight >= 0 && weight <= 1)) throw new RangeError(`outer contribution: weight ${weight} outside [0, 1]`);
    this.progress = pseudoGradient(this.start, live, 1);
    return pseudoGradient(this.start, live, weight);
  }

  private check(values: Float32Array, what: string): void {
    if (values.length !== this.start.length)
      throw new RangeError(`${what}: ${values.length} floats, the model has ${this.start.length}`);
  }
}
