/**
 * The elastic loop's steps inside the training worker, arranged so the GPU and the worker's own
 * thread overlap and so no read-back is made that a later one could carry:
 *
 * - `applyAndHash(sums, count, next)` writes the allreduced sums (or keeps the gradients already on
 *   the device: a world of one tab has nothing to reduce), records the optimizer step, then the hash
 *   of the new state's 4 KiB chunks (parameters, optimizer moments; and t) on the GPU
 *   (kernels/ops/sha256.wgsl) with a copy of only their digests (or, with a hasher that has no GPU
 *   form, a copy of the buffers: web/worker/params-hasher.ts
 *   picks that on CPU-backed adapters), and then, when the caller names the next step's samples, records
 *   that step's forward and backward passes at once (they only read the parameters just written). The
 *   worker finishes the tree hash (core/state/hash.ts) while the GPU computes the next step; the main thread
 *   gets the hash for its step report, and the coordinator's commit runs while the next gradients are
 *   formed. Where the parameters are read back anyway (verification sketches need them), they are
 *   hashed on the CPU: the same definition, the same value.
 * - `computeGradients(indices)` returns that prefetched result when it is for the same samples and
 *   the state has not changed since (`stateChanged` is called by every restore and rebuild), else it
 *   computes them now.
 *
 * A prefetch never changes the training state (only the gradient, activation and loss buffers), so
 * the backup, the hash and the "at most one uncommitted step" rule are as without it.
 */
import { NO_HASH } from '../../core/protocol/tab-messages';
import { paramsSketch, type StepSketches } from '../../core/state/sketch';
import { stepSketches } from '../../core/state/step-sketches';
import type { WireCompression } from '../../core/wire/ring-sum';
import type { Model } from '../../kernels/model/model';
import { hashModelState, type ParamsHasher } from '../../kernels/model/training-state';
import type { BatchAssembler } from './data/batches';
import type { GradientResult } from './types';

export interface NextIndices {
  indices: Uint32Array;
  keepOnDevice: boolean;
}

export interface ApplyOptions {
  backupFirst?: boolean;
  prefetched?: Uint32Array;
  /**
   * false: skip the hash (a local-mode inner step: the ranks' parameters differ by design until the
   * outer step, so there is nothing to agree on and no read-back is made); the result's hash is NO_HASH.
   */
  hash?: boolean;
  /**
   * The job verifies contributions: sketch this rank's own gradient sums (`own`, as it sent them into
   * the all-reduce), what it sent and received in the reduce-scatter (ring-allreduce.ts `record`), the
   * reduced sums applied and the new parameters, seeded by the new hash, for a world of `world` ranks
   * (core/state/sketch.ts). Needs `sums` (no gradients kept on the device).
   */
  sketch?: { own: ArrayBuffer; sent: ArrayBuffer; received: ArrayBuffer; world: number; compression?: WireCompression };
}

export interface ApplyResult {
  hash: string;
  /** The step's sketches (with `opts.sketch`). */
  sketch?: StepSketches;
  /** The consumed prefetch of this step (`opts.prefetched`): its loss and sample count. */
  gradient: GradientResult | null;
}

interface Prefetch {
  indices: Uint32Array;
  version: number;
  keepOnDevice: boolean;
  result: Promise<GradientResult>;
}

export class ElasticSteps {
  private version = 0;
  private prefetched: Prefetch | null = null;

  constructor(
    private readonly model: Model,
    private readonly batches: () => BatchAssembler,
    private readonly hasher: ParamsHasher,
    /** Records the GPU copy of the live state into the backup (TrainingState.saveBackup). */
    private readonly saveBackup: () => void,
  ) {}

  /** Drop a prefetch (the model is being replaced). */
  destroy(): void {
    this.drop();
  }

  /** The live state was replaced (restore, backup put back, rebuild): a prefetch is stale. */
  stateChanged(): void {
    this.version += 1;
    this.drop();
  }

  /** Gradient sums over `indices`; with `keepOnDevice` they stay in the grads buffer (`gradients` null). */
  computeGradients(indices: Uint32Array, keepOnDevice: boolean): Promise<GradientResult> {
    return this.take(indices, keepOnDevice) ?? this.start(indices, keepOnDevice);
  }

  /**
   * One optimizer step over `sampleCount` samples with `sums` (null: the gradients on the device),
   * then, if `next` is given, the next step's gradients recorded behind it. Resolves to the new hash.
   *
   * `opts.backupFirst`: save the live state (the previous step, just committed) as the backup before
   * applying, in this same task (one worker call per step instead of two).
   * `opts.prefetched`: this step's samples, whose gradients a previous call left on the device
   * (`next` with `keepOnDevice`); their loss is returned with the hash, so a world of one makes one
   * worker call per step.
   */
  async applyAndHash(
    sums: ArrayBuffer | null,
    sampleCount: number,
    next: NextIndices | null,
    opts: ApplyOptions = {},
  ): Promise<ApplyResult> {
    // First, before anything can fail: the caller tags the backup as saved when it asks for it.
    if (opts.backupFirst) this.saveBackup();
    let own: Promise<GradientResult> | null = null;
    // A prefetch made stale (a checkpoint upload parked and restored the state) is computed again.
    if (opts.prefetched) own = this.take(opts.prefetched, true) ?? this.start(opts.prefetched, true);
    else this.drop();
    if (sums) this.model.writeGradients(new Float32Array(sums));
    this.model.applyOptimizer(sampleCount);
    this.version += 1;
    const sketchOf = opts.sketch;
    if (sketchOf && !sums) throw new Error('applyAndHash: sketches need the sums (no gradients kept on the device)');
    const hashed: Promise<{ hash: string; params?: number[] }> =
      opts.hash === false
        ? Promise.resolve({ hash: NO_HASH })
        : sketchOf
          ? this.model.withState((params, moments, t) => {
              const hash = this.hasher.ofState(params, moments, t);
              return { hash, params: Array.from(paramsSketch(params, hash).values) };
            })
          : this.hashState().then((hash) => ({ hash }));
    if (next && next.indices.length > 0) {
      const result = this.start(next.indices, next.keepOnDevice);
      result.catch(() => undefined);
      this.prefetched = {
        indices: next.indices.slice(),
        version: this.version,
        keepOnDevice: next.keepOnDevice,
        result,
      };
    }
    const [{ hash, params }, gradient] = await Promise.all([hashed, own]);
    if (!sketchOf || !sums || !params) return { hash, gradient };
    const [mine, sum, sent, received] = [sketchOf.own, sums, sketchOf.sent, sketchOf.received].map(
      (b) => new Float32Array(b),
    );
    // The parameter sketch was made from the mapped parameters above (they are not kept).
    const sketch = stepSketches(
      { own: mine, sum, sent, received, params: new Float32Array(0) },
      hash,
      sketchOf.world,
      sketchOf.compression ?? 'none',
    );
    return { hash, gradient, sketch: { ...sketch, params } };
  }

  /**
   * The hash of the training state (`hashModelState`: params, moments and t, core/state/hash.ts
   * `trainingStateHash`): from their chunk digests computed on the GPU (`Model.withStateDigests`: a
   * dispatch and a copy of 32 bytes per 4 KiB per buffer), or from one read-back of every buffer into a
   * reused staging buffer. Recorded now, so it sees exactly the state of the step just applied,
   * whatever is submitted after it.
   */
  private hashState(): Promise<string> {
    return hashModelState(this.model, this.hasher);
  }

  /** The prefetch for `indices` made on the current state, or null; it is consumed either way. */
  private take(indices: Uint32Array, keepOnDevice: boolean): Promise<GradientResult> | null {
    const p = this.prefetched;
    this.prefetched = null;
    if (p && p.version === this.version && p.keepOnDevice === keepOnDevice && sameIndices(p.indices, indices))
      return p.result;
    p?.result.catch(() => undefined);
    return null;
  }

  private start(indices: Uint32Array, keepOnDevice: boolean): Promise<GradientResult> {
    if (indices.length < 1) throw new Error('computeGradients: no samples');
    const { x, labels, batch } = this.batches().gather(indices);
    this.model.forwardBackward(x, labels, batch);
    const loss = this.model.readLossSum();
    if (keepOnDevice) return loss.then((lossSum) => ({ gradients: null, lossSum, samples: batch }));
    const gradients = this.model.readGradients();
    return Promise.all([gradients, loss]).then(([g, lossSum]) => ({
      gradients: g.buffer as ArrayBuffer,
      lossSum,
      samples: batch,
    }));
  }

  private drop(): void {
    this.prefetched?.result.catch(() => undefined);
    this.prefetched = null;
  }
}

/** Whether two sample lists are the same (a prefetch is used only for exactly its samples). */
export function sameIndices(a: Uint32Array, b: Uint32Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
