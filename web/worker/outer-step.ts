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
 * state), its copy in the backup (saved and restored with the GPU backup), and θ_committed of the
 * outer step in flight (read for the pseudo-gradient, used again by the Nesterov step).
 */
export class OuterState {
  momentum: Float32Array;
  private backup: Float32Array | null = null;
  private committed: Float32Array | null = null;

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

  /** This rank's pseudo-gradient part; remembers `committed` for `step`. */
  pseudoGradient(committed: Float32Array, local: Float32Array, weight: number): Float32Array {
    this.committed = committed;
    return pseudoGradient(committed, local, weight);
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
