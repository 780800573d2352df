/**
 * The outer step of local sync mode (DiLoCo, Douillard et al. 2023) inside the training worker: the
 * outer momentum and its backup. The arithmetic itself (`pseudoGradient`, `nesterovStep`: plain float32
 * on the CPU, once per outer step on a few MB, the same bytes in every engine) is
 * core/training/outer-step.ts, shared with the verifier.
 */
import { nesterovStep, type OuterOptimizer, pseudoGradient } from '../../core/training/outer-step';

export { nesterovStep, type OuterOptimizer, pseudoGradient } from '../../core/training/outer-step';

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
