/**
 * The verifier's arithmetic: recompute one committed step from the state before it, as the tabs computed
 * it, and sketch the result the way the ranks sketched their claims (core/state/sketch.ts).
 *
 * For step s the coordinator hands over θ_{s−1} (a hash-verified snapshot: parameters, optimizer moments,
 * optimizer step t), the hash the ranks reported for θ_s (the sketch seed), and every rank's sample
 * indices. The recomputation is what a tab does in web/worker/elastic-steps.ts:
 *
 *   g_r   = the gradient sums of rank r's samples at θ_{s−1}   (one forward/backward, kernels/model/model.ts)
 *   G     = Σ_r g_r, float32, in rank order                      (the all-reduce's sum)
 *   θ_s*  = the job's optimizer applied to θ_{s−1} with G / count (`writeGradients` + `applyOptimizer(count)`)
 *
 * and the answer is gradientSketch(g_r) per rank, paramsSketch(θ_s*) and hashParams(θ_s*). The verifier
 * decides nothing: the coordinator compares these with the ranks' sketches (within RECOMPUTE_TOLERANCE).
 *
 * Only every-step sync over an IDX image set is recomputed: a local-steps job's outer step and the
 * chunked datasets (text, tensors) are refused when the Recomputer is created. With `compression` other
 * than `none`, the tabs applied a compressed sum, which differs from G by the codec's rounding; the
 * recomputation uses the exact float32 sum (the comparison's tolerance must allow for the codec).
 */
import { hashParams, paramsHasher } from '../core/state/hash';
import { type ImageSplitBytes, ImageBatches } from '../core/data/image-batches';
import type { OptimizerSpec, SyncSpec } from '../core/training/job';
import { type ModelSpec, type ParamLayout, parameterLayout } from '../core/training/model-spec';
import { gradientSketches, paramsSketch, type Sketch, sketchSeed } from '../core/state/sketch';
import type { TrainingSnapshot } from '../core/state/snapshot';
import { verificationUnsupported } from '../core/protocol/verifier';
import { createModel, type Model } from '../kernels/model/model';
import type { Gpu } from '../kernels/runtime';
import { createTrainingState, type TrainingState } from '../kernels/model/training-state';

/** The part of a job the recomputation depends on (a `JobSpec` has all of it). */
export interface RecomputeJob {
  model: ModelSpec;
  optimizer: OptimizerSpec;
  globalBatch: number;
  sync: SyncSpec;
  /** The job's kernel precision: an f16 job is recomputed in f16, as its tabs compute (default f32). */
  kernels?: { precision: 'f32' | 'f16' };
}

export interface RecomputeRequest {
  /** θ_{s−1}: the committed state before the step (params, moments, optimizer step t). */
  snapshot: Pick<TrainingSnapshot, 'params' | 'moments' | 'optimizer'> & { outer?: Float32Array | null };
  /** The hash of θ_s the ranks reported: it seeds every sketch of the step. */
  stepHash: string;
  /** Ranks in the step's world; `slices` has one entry per rank. */
  world: number;
  /** Each rank's dataset sample indices (may be empty: that rank's gradient is all zeros). */
  slices: readonly Uint32Array[];
  /** Samples of the step: the optimizer divides the summed gradients by it. Must equal the slices' total. */
  count: number;
}

export interface RecomputeResult {
  /** gradientSketch(g_r, stepHash, world), by rank. */
  own: Sketch[];
  /** paramsSketch(θ_s*, stepHash). */
  params: Sketch;
  /** hashParams(θ_s*): equals the ranks' hash only where the arithmetic is bit-identical (same adapter). */
  paramsHash: string;
  /** Wall time of the recomputation (state upload to sketches), ms. */
  ms: number;
}

/** A request the verifier refuses (bad input), as opposed to a device or internal failure. */
export class RecomputeError extends Error {
  override name = 'RecomputeError';
}

function refuse(message: string): never {
  throw new RecomputeError(message);
}

export class Recomputer {
  readonly layout: ParamLayout;
  private readonly model: Model;
  private readonly state: TrainingState;
  private readonly batches: ImageBatches;

  /**
   * `train`: the IDX training split, limited to the job's samples (`dataset.subset`): an index beyond it
   * is refused. `seed`: the initial parameters (`initialParams`), as a tab initialises them.
   */
  constructor(
    gpu: Gpu,
    readonly job: RecomputeJob,
    train: ImageSplitBytes,
    seed = 1,
  ) {
    const why = verificationUnsupported({ ...job, dataset: { name: 'images' } });
    if (why) refuse(why);
    const spec = job.model as Exclude<ModelSpec, { type: 'transformer' }>;
    const [h, w, c] = spec.input;
    if (h !== train.rows || w !== train.cols || c !== 1)
      refuse(`model ${spec.name} takes ${h}×${w}×${c} inputs, the dataset has ${train.rows}×${train.cols}×1 images`);
    if (train.count < 1) refuse('the training set is empty');
    this.layout = parameterLayout(spec);
    // A rank's slice is at most a step, and a step at most the global batch and the data set (as the tabs size it).
    const maxBatch = Math.min(job.globalBatch, train.count);
    const precision = job.kernels?.precision ?? 'f32';
    this.model = createModel(gpu, spec, this.layout, { maxBatch, optimizer: job.optimizer, seed, precision });
    this.state = createTrainingState(this.model, paramsHasher);
    this.batches = new ImageBatches(train, maxBatch);
  }

  /** Training samples a request may name (the job's `dataset.subset` applied). */
  get trainCount(): number {
    return this.batches.split.count;
  }

  /** The parameters the model was created with (a fresh job's θ_0 for this seed), read back. */
  initialParams(): Promise<Float32Array> {
    return this.model.readParams();
  }

  async recompute(req: RecomputeRequest): Promise<RecomputeResult> {
    const start = performance.now();
    this.check(req);
    this.state.importState({
      params: req.snapshot.params,
      moments: req.snapshot.moments,
      step: req.snapshot.optimizer.t,
    });
    const n = this.layout.totalElements;
    const own: Float32Array[] = [];
    for (const slice of req.slices) own.push(slice.length === 0 ? new Float32Array(n) : await this.gradients(slice));
    const sum = new Float32Array(n);
    // Float32Array stores round each double sum to float32: exactly the float32 addition a tab performs.
    for (const g of own) for (let i = 0; i < n; i++) sum[i] += g[i];
    this.model.writeGradients(sum);
    this.model.applyOptimizer(req.count);
    const params = await this.model.readParams();
    return {
      own: gradientSketches(own, req.stepHash, req.world),
      params: paramsSketch(params, req.stepHash),
      paramsHash: hashParams(params),
      ms: performance.now() - start,
    };
  }

  /** Free the model's GPU buffers. */
  destroy(): void {
    this.state.destroy();
    this.model.destroy();
  }

  /** The gradient sums of one rank's samples at the imported state (one forward/backward, as a tab). */
  private gradients(indices: Uint32Array): Promise<Float32Array> {
    const { x, labels, batch } = this.batches.gather(indices);
    this.model.forwardBackward(x, labels, batch);
    return this.model.readGradients();
  }

  /** Everything a request can get wrong, checked before the device is touched. */
  private check(req: RecomputeRequest): void {
    sketchSeed(req.stepHash, 'gradient');
    const { world, slices, count, snapshot } = req;
    if (!Number.isInteger(world) || world < 1) refuse(`world ${world} must be a positive integer`);
    if (slices.length !== world) refuse(`${slices.length} slices for a world of ${world}`);
    let total = 0;
    for (const [rank, slice] of slices.entries()) {
      if (slice.length > this.batches.maxBatch)
        refuse(`rank ${rank} has ${slice.length} samples, more than a step's ${this.batches.maxBatch}`);
      for (const index of slice)
        if (index >= this.batches.split.count)
          refuse(`rank ${rank}: sample index ${index} outside the job's ${this.batches.split.count} samples`);
      total += slice.length;
    }
    if (!Number.isInteger(count) || count < 1 || count !== total)
      refuse(`count ${count} must be the slices' total of ${total} samples (at least 1)`);
    if (snapshot.optimizer.kind !== this.job.optimizer.kind)
      refuse(`the snapshot's optimizer is ${snapshot.optimizer.kind}, the job's ${this.job.optimizer.kind}`);
    if (snapshot.outer) refuse('the snapshot carries an outer momentum: a local-steps state');
    if (snapshot.params.length !== this.layout.totalElements)
      refuse(
        `the snapshot has ${snapshot.params.length} parameters, model ${this.job.model.name} has ${this.layout.totalElements}`,
      );
  }
}
