/**
 * The verifier's arithmetic: recompute one checked commit from the state it started from, as the tabs
 * computed it, and sketch the result the way the ranks sketched their claims (core/state/sketch.ts).
 *
 * **Every-step mode**, step s from θ_{s−1} (params, moments, t; hash-checked by the coordinator):
 *
 *   g_r   = the gradient sums of rank r's samples at θ_{s−1}  (one forward/backward, kernels/model/model.ts)
 *   G     = the ring's sum of the g_r, with the job's wire      (core/wire/ring-sum.ts: the very bytes the tabs decoded)
 *   θ_s*  = the job's optimizer applied to θ_{s−1} with G / count (`writeGradients` + `applyOptimizer(count)`)
 *
 * and the answer is gradientSketch(g_r) per rank and paramsSketch(θ_s*).
 *
 * **Local mode**, rank r's outer step ending at s, from the inner state it started from (θ_c, u, and
 * its own moments and t):
 *
 *   θ_r   = its inner steps on its slices, as its tab took them (a step with no samples takes none)
 *   Δ_r   = (θ_c − θ_r) · n_r / n                                 (core/training/outer-step.ts)
 *
 * and the answer is gradientSketch(Δ_r), the sketches of its moments after the inner steps, and the
 * outer step's result predicted from θ_c, u and the agreed sketch of the summed Δ (a sketch is linear,
 * so u_s = μu + Δ and θ_s = θ_c − lr(Δ + μu_s) carry over bucket by bucket).
 *
 * A commit that started at step 0 must have started from the job's fresh state: `startOk` says whether
 * the upload is it. The verifier decides nothing: the coordinator compares (within RECOMPUTE_TOLERANCE).
 */
import { hashParams, paramsHasher } from '../core/state/hash';
import type { BatchSource } from '../core/data/image-batches';
import type { JobSpec } from '../core/training/job';
import { outerWeight } from '../core/training/outer-weights';
import { pseudoGradient } from '../core/training/outer-step';
import { type ParamLayout, parameterLayout } from '../core/training/model-spec';
import { gradientSketch, gradientSketches, paramsSketch, type Sketch } from '../core/state/sketch';
import type { TrainingSnapshot } from '../core/state/snapshot';
import { ringSum } from '../core/wire/ring-sum';
import { createModel, type Model } from '../kernels/model/model';
import type { Gpu } from '../kernels/runtime';
import { createTrainingState, type TrainingState } from '../kernels/model/training-state';

/** The part of a job the recomputation depends on (a `JobSpec` has all of it). */
export type RecomputeJob = Pick<JobSpec, 'model' | 'optimizer' | 'globalBatch' | 'sync'> & {
  /** The job's kernel precision: an f16 job is recomputed in f16, as its tabs compute (default f32). */
  kernels?: { precision: 'f32' | 'f16' };
};

/** The training samples as the tabs read them (core/data: image, tensor or text batches) and how many. */
export interface TrainingSamples {
  batches: BatchSource;
  count: number;
}

export interface RecomputeRequest {
  /** The state the commit started from (params, moments, optimizer step t; local mode: outer momentum). */
  snapshot: Pick<TrainingSnapshot, 'params' | 'moments' | 'optimizer'> & { outer?: Float32Array | null };
  /** The committed hash of the checked commit: it seeds every sketch. */
  stepHash: string;
  /** Ranks in the commit's world. */
  world: number;
  mode: 'every-step' | 'local';
  /** Local mode: the rank checked. */
  rank?: number;
  /** Each step of the commit: the ranks' sample indices (local: the checked rank's only) and the step's samples. */
  steps: readonly { slices: readonly Uint32Array[]; count: number }[];
  /** The commit started at step 0: the snapshot must be the fresh state. */
  fresh: boolean;
  /** Local mode: the agreed sketch of the summed pseudo-gradient, with its masses. */
  sum?: { values: readonly number[]; mass: readonly number[] };
  /** Start from the parameters moved by a few roundings (`perturbed`): how far rounding alone moves the result. */
  perturb?: boolean;
}

export interface RecomputeResult {
  own: Sketch[];
  params: Sketch;
  outer?: Sketch;
  moments?: Sketch[];
  startOk: boolean;
  /** hashParams of the new parameters (every-step) or of θ_r (local): for the log. */
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

/**
 * How far `perturbed` moves each parameter, relative: 2^-22, two to four float32 roundings. A GPU that
 * rounds differently from this one moves a computation about that much; a well-conditioned step moves its
 * result about as little (ratios near 1e-6, far under RECOMPUTE_TOLERANCE), a chaotic one (a poisoned
 * state: saturated softmax, huge activations) as far as another GPU does.
 */
export const PERTURBATION = 2 ** -22;

/** `params`, each moved by ±PERTURBATION relative (a fixed sign pattern), as a new array. */
export function perturbed(params: Float32Array): Float32Array {
  const out = new Float32Array(params.length);
  for (let i = 0; i < params.length; i++) {
    const sign = Math.imul(i + 1, 0x9e3779b1) >>> 31 === 0 ? 1 : -1;
    out[i] = params[i] * (1 + sign * PERTURBATION);
  }
  return out;
}

export class Recomputer {
  readonly layout: ParamLayout;
  private readonly model: Model;
  private readonly state: TrainingState;
  private readonly maxBatch: number;
  private initial: Float32Array | null = null;

  /** `samples`: the job's training samples (`dataset.subset` applied); `seed`: the fresh parameters' seed. */
  constructor(
    gpu: Gpu,
    readonly job: RecomputeJob,
    private readonly samples: TrainingSamples,
    private readonly seed = 1,
  ) {
    if (samples.count < 1) refuse('the training set is empty');
    this.layout = parameterLayout(job.model);
    // A rank's slice is at most a step, and a step at most the global batch and the data set (as the tabs size it).
    this.maxBatch = Math.min(job.globalBatch, samples.count);
    const precision = job.kernels?.precision ?? 'f32';
    this.model = createModel(gpu, job.model, this.layout, {
      maxBatch: this.maxBatch,
      optimizer: job.optimizer,
      seed,
      precision,
    });
    this.state = createTrainingState(this.model, paramsHasher);
  }

  /** Training samples a request may name (the job's `dataset.subset` applied). */
  get trainCount(): number {
    return this.samples.count;
  }

  /** The parameters of a fresh job (θ_0 for this seed), as a tab initialises them. */
  async initialParams(): Promise<Float32Array> {
    if (!this.initial) {
      const scratch = createModel(this.model.gpu, this.job.model, this.layout, {
        maxBatch: 1,
        optimizer: this.job.optimizer,
        seed: this.seed,
        precision: this.job.kernels?.precision ?? 'f32',
      });
      this.initial = await scratch.readParams();
      scratch.destroy();
    }
    return this.initial;
  }

  async recompute(req: RecomputeRequest): Promise<RecomputeResult> {
    const start = performance.now();
    this.check(req);
    const startOk = !req.fresh || (await this.isFresh(req.snapshot));
    const params = req.perturb ? perturbed(req.snapshot.params) : req.snapshot.params;
    this.state.importState({ params, moments: req.snapshot.moments, step: req.snapshot.optimizer.t });
    const from = { ...req, snapshot: { ...req.snapshot, params } };
    const result = req.mode === 'local' ? await this.localStep(from) : await this.everyStep(from);
    return { ...result, startOk, ms: performance.now() - start };
  }

  /** Every rank's gradient sums, the ring's sum of them, the optimizer step: the sketches of step s. */
  private async everyStep(req: RecomputeRequest): Promise<Omit<RecomputeResult, 'startOk' | 'ms'>> {
    const n = this.layout.totalElements;
    const [step] = req.steps;
    const own: Float32Array[] = [];
    for (const slice of step.slices) own.push(slice.length === 0 ? new Float32Array(n) : await this.gradients(slice));
    this.model.writeGradients(ringSum(own, this.job.sync.compression));
    this.model.applyOptimizer(step.count);
    const params = await this.model.readParams();
    return {
      own: gradientSketches(own, req.stepHash, req.world),
      params: paramsSketch(params, req.stepHash),
      paramsHash: hashParams(params),
    };
  }

  /** The rank's inner steps, its pseudo-gradient, its end moments, and the outer step predicted from the sum. */
  private async localStep(req: RecomputeRequest): Promise<Omit<RecomputeResult, 'startOk' | 'ms'>> {
    const committed = req.snapshot.params;
    let mine = 0;
    let all = 0;
    for (const { slices, count } of req.steps) {
      const slice = slices[0];
      if (slice.length > 0) {
        const { x, labels, batch } = this.samples.batches.gather(slice);
        this.model.forwardBackward(x, labels, batch);
        this.model.applyOptimizer(slice.length);
      }
      mine += slice.length;
      all += count;
    }
    const local = await this.model.readParams();
    const delta = pseudoGradient(committed, local, outerWeight(mine, all));
    const moments = await Promise.all(
      this.model.moments.map((m) => this.model.readFloats(m, this.layout.totalElements)),
    );
    return {
      own: [gradientSketch(delta, req.stepHash, req.world)],
      moments: gradientSketches(moments, req.stepHash, req.world),
      ...this.outerPrediction(req),
      paramsHash: hashParams(local),
    };
  }

  /**
   * The outer step's result from the state it started from (θ_c, u) and the agreed sketch of Δ:
   * u_s = μu + Δ and θ_s = θ_c − lr(Δ + μu_s), bucket by bucket, with masses that bound the float32 rounding.
   */
  private outerPrediction(req: RecomputeRequest): { params: Sketch; outer: Sketch } {
    if (this.job.sync.mode !== 'local' || !req.sum) refuse('a local check needs the agreed sum');
    const { lr, momentum: mu } = this.job.sync.outer;
    const [theta, u] = gradientSketches([req.snapshot.params, req.snapshot.outer!], req.stepHash, req.world);
    const buckets = theta.values.length;
    if (req.sum.values.length !== buckets || req.sum.mass.length !== buckets)
      refuse(`the sum sketch has ${req.sum.values.length} buckets, a world of ${req.world} has ${buckets}`);
    const outer = { values: new Float64Array(buckets), mass: new Float64Array(buckets) };
    const params = { values: new Float64Array(buckets), mass: new Float64Array(buckets) };
    for (let b = 0; b < buckets; b++) {
      outer.values[b] = mu * u.values[b] + req.sum.values[b];
      outer.mass[b] = mu * u.mass[b] + req.sum.mass[b];
      params.values[b] = theta.values[b] - lr * (req.sum.values[b] + mu * outer.values[b]);
      params.mass[b] = theta.mass[b] + lr * (req.sum.mass[b] + mu * outer.mass[b]);
    }
    return { params, outer };
  }

  /** Whether the snapshot is the fresh state: the seed's parameters, zero moments (and momentum), t = 0. */
  private async isFresh(snapshot: RecomputeRequest['snapshot']): Promise<boolean> {
    const initial = await this.initialParams();
    const bits = (x: Float32Array) => new Uint32Array(x.buffer, x.byteOffset, x.length);
    const same = (a: Float32Array, b: Float32Array) => bits(a).every((v, i) => v === bits(b)[i]);
    const zero = (a: Float32Array) => bits(a).every((v) => v === 0);
    return (
      snapshot.optimizer.t === 0 &&
      same(snapshot.params, initial) &&
      snapshot.moments.every(zero) &&
      (!snapshot.outer || zero(snapshot.outer))
    );
  }

  /** Free the model's GPU buffers. */
  destroy(): void {
    this.state.destroy();
    this.model.destroy();
  }

  /** The gradient sums of one rank's samples at the imported state (one forward/backward, as a tab). */
  private gradients(indices: Uint32Array): Promise<Float32Array> {
    const { x, labels, batch } = this.samples.batches.gather(indices);
    this.model.forwardBackward(x, labels, batch);
    return this.model.readGradients();
  }

  /** Everything a request can get wrong, checked before the device is touched. */
  private check(req: RecomputeRequest): void {
    gradientSketch(new Float32Array(0), req.stepHash, 1); // a malformed hash throws here
    const { world, steps, snapshot } = req;
    if (!Number.isInteger(world) || world < 1) refuse(`world ${world} must be a positive integer`);
    const local = req.mode === 'local';
    if (local !== (this.job.sync.mode === 'local')) refuse(`a ${req.mode} check of a ${this.job.sync.mode} job`);
    if (local && !(Number.isInteger(req.rank) && req.rank! >= 0 && req.rank! < world))
      refuse(`rank ${req.rank} is not in a world of ${world}`);
    if (!local && steps.length !== 1) refuse(`an every-step check recomputes one step, not ${steps.length}`);
    for (const [k, { slices, count }] of steps.entries()) this.checkStep(k, slices, count, local ? 1 : world, !local);
    if (snapshot.optimizer.kind !== this.job.optimizer.kind)
      refuse(`the snapshot's optimizer is ${snapshot.optimizer.kind}, the job's ${this.job.optimizer.kind}`);
    if (!!snapshot.outer !== local)
      refuse(local ? 'a local-mode state needs its outer momentum' : 'the snapshot carries an outer momentum');
    if (snapshot.params.length !== this.layout.totalElements)
      refuse(
        `the snapshot has ${snapshot.params.length} parameters, model ${this.job.model.name} has ${this.layout.totalElements}`,
      );
  }

  /**
   * One step's slices: `ranks` of them, each at most a step, indices of the job's samples, summing to
   * `count` (`whole`: every rank's slice is given; at least 1) or to at most it (a local check: `count`
   * is the samples of the ranks that computed the step, 0 when a carried commit's survivors had none in
   * it: checks.ts `checkedSlices`).
   */
  private checkStep(k: number, slices: readonly Uint32Array[], count: number, ranks: number, whole: boolean): void {
    if (slices.length !== ranks) refuse(`step ${k}: ${slices.length} slices, expected ${ranks}`);
    let total = 0;
    for (const [rank, slice] of slices.entries()) {
      if (slice.length > this.maxBatch)
        refuse(`step ${k}, slice ${rank}: ${slice.length} samples, more than a step's ${this.maxBatch}`);
      for (const index of slice)
        if (index >= this.samples.count)
          refuse(`step ${k}, slice ${rank}: sample index ${index} outside the job's ${this.samples.count} samples`);
      total += slice.length;
    }
    if (
      !Number.isInteger(count) ||
      count < (whole ? 1 : 0) ||
      count > this.maxBatch ||
      (whole ? count !== total : count < total)
    )
      refuse(`step ${k}: count ${count} must be the step's samples (the slices' total ${total}, at least 1)`);
  }
}
