/**
 * The per-adapter autotuner: on the job's real model and batch, it times each op family's candidate
 * variants (variants.ts) and keeps the fastest, within a time budget.
 *
 * How: a reference model with the default variants computes one step on a seeded synthetic batch
 * (gradients, loss, and the parameters after one optimizer step). Then, family by family (matmul
 * first: that is where the time goes), each candidate gets its own model (the other families at the
 * best so far), which must reproduce the reference's bits exactly — a candidate that does not, or whose
 * pipeline fails, is refused and never timed — and then the family's dispatches of a training step are
 * timed (`timeCalls`: repetitions in one submission until they last `minSampleMs`, best of two). A
 * candidate replaces the best only when it is at least `MIN_GAIN` faster, so noise does not trade the
 * default for an equal. When the budget runs out the tuner stops and keeps what it found.
 *
 * It changes no training state: its models are its own, freed when it is done.
 */
import { isTransformer, type ModelSpec, type ParamLayout } from '../../core/training/model-spec';
import { createModel, type Model } from '../model/model';
import type { OptimizerConfig } from '../model/flat-optimizer';
import type { Precision } from '../model/model-graph';
import { recordCalls, type Gpu, type KernelCall } from '../runtime';
import {
  candidates,
  DEFAULT_VARIANTS,
  FAMILIES,
  sameVariant,
  variantName,
  type Family,
  type KernelVariants,
} from './variants';

/** The default budget of a first start: at most this long tuning (ms), then the best found is kept. */
export const TUNING_BUDGET_MS = 3000;
/** A candidate must be this much faster than the best so far to replace it (timing noise). */
export const MIN_GAIN = 0.05;

export interface TuneRequest {
  spec: ModelSpec;
  layout: ParamLayout;
  /** The largest batch the job's steps use (the model's maxBatch): the shapes timed. */
  maxBatch: number;
  optimizer: OptimizerConfig;
  precision: Precision;
  /** Stop starting candidates after this long (ms; default TUNING_BUDGET_MS). */
  budgetMs?: number;
  /** A timed sample lasts at least this long (ms; default 20). */
  minSampleMs?: number;
  /** Replace a family's candidates (`candidates(gpu, family)` otherwise): benches and tests. */
  candidates?: { [F in Family]?: KernelVariants[F][] };
}

/** One family's outcome. */
export interface FamilyTuning {
  family: Family;
  /** The chosen variant's name (variants.ts `variantName`). */
  chosen: string;
  /** The family's dispatches per training step with the default variant and with the chosen one (ms). */
  defaultMs: number;
  chosenMs: number;
  /** Candidates timed (the default included). */
  timed: number;
  /** Candidates refused before timing, with why (bits differ from the reference, pipeline error). */
  refused: string[];
  /** Candidates not reached before the budget ran out. */
  skipped: number;
}

export interface TuningResult {
  variants: KernelVariants;
  families: FamilyTuning[];
  /** The model's matmul GFLOP/s with the chosen tile (FLOPs of a step's matmuls / their time), or null. */
  matmulGflops: number | null;
  /** Wall time of the tuning (ms). */
  tuneMs: number;
}

/** The label prefix of each family's dispatches (runtime `KernelCall.label`). */
const FAMILY_LABEL: Record<Family, RegExp> = {
  matmul: /^matmul/,
  conv2d: /^conv2d\./,
  attention: /^attention\./,
  layernorm: /^layernorm\./,
  optimizer: /^optimizer\./,
};

export async function autotune(gpu: Gpu, req: TuneRequest): Promise<TuningResult> {
  const started = performance.now();
  const deadline = started + (req.budgetMs ?? TUNING_BUDGET_MS);
  const batch = syntheticBatch(req.spec, req.maxBatch);
  const reference = await withModel(gpu, req, DEFAULT_VARIANTS, (m) => stepBits(m, batch));
  if (reference.error) throw new Error(`autotune: the default kernels failed on this device: ${reference.error}`);
  let best = DEFAULT_VARIANTS;
  const families: FamilyTuning[] = [];
  let matmulGflops: number | null = null;
  for (const family of FAMILIES) {
    const outcome = await tuneFamily(gpu, req, { family, best, batch, reference: reference.value!, deadline });
    if (!outcome) continue;
    best = outcome.variants;
    families.push(outcome.tuning);
    if (family === 'matmul' && outcome.flops > 0) matmulGflops = outcome.flops / (outcome.tuning.chosenMs * 1e6);
  }
  return { variants: best, families, matmulGflops, tuneMs: performance.now() - started };
}

interface FamilyContext {
  family: Family;
  best: KernelVariants;
  batch: SyntheticBatch;
  reference: Uint32Array;
  deadline: number;
}

/** Time the family's default, then each candidate checked first; null when the model has no such dispatch. */
async function tuneFamily(
  gpu: Gpu,
  req: TuneRequest,
  c: FamilyContext,
): Promise<{ variants: KernelVariants; tuning: FamilyTuning; flops: number } | null> {
  const minMs = req.minSampleMs ?? 20;
  const base = await withModel(gpu, req, c.best, (m) => timeFamily(m, c.family, c.batch, minMs));
  if (base.error) throw new Error(`autotune: ${c.family} failed with the default kernels: ${base.error}`);
  if (base.value!.calls === 0) return null;
  const list = (req.candidates?.[c.family] ?? candidates(gpu, c.family)).filter(
    (v) => !sameVariant(v, c.best[c.family]),
  );
  const tuning: FamilyTuning = {
    family: c.family,
    chosen: variantName(c.family, c.best[c.family]),
    defaultMs: base.value!.ms,
    chosenMs: base.value!.ms,
    timed: 1,
    refused: [],
    skipped: 0,
  };
  let best = c.best;
  for (const candidate of list) {
    if (performance.now() > c.deadline) {
      tuning.skipped++;
      continue;
    }
    const variants = { ...best, [c.family]: candidate } as KernelVariants;
    const name = variantName(c.family, candidate);
    const tried = await withModel(gpu, req, variants, async (m) => {
      const bits = await stepBits(m, c.batch);
      if (!sameBits(bits, c.reference)) return { refused: 'its results differ from the default kernels’' };
      return { time: await timeFamily(m, c.family, c.batch, minMs) };
    });
    const outcome = tried.value;
    if (tried.error || outcome?.refused) {
      tuning.refused.push(`${name}: ${tried.error ?? outcome?.refused}`);
      continue;
    }
    tuning.timed++;
    if (outcome!.time!.ms < tuning.chosenMs * (1 - MIN_GAIN)) {
      best = variants;
      tuning.chosen = name;
      tuning.chosenMs = outcome!.time!.ms;
    }
  }
  return { variants: best, tuning, flops: base.value!.flops };
}

/**
 * A seeded batch of the model's input kind: pixels in [0, 1) and classes, or byte windows (`windows`
 * is empty for a classifier, `x` and `labels` for a transformer). bench:gpu times its steps on one too.
 */
export interface SyntheticBatch {
  x: Float32Array;
  labels: Uint32Array;
  windows: Uint32Array;
}

export function syntheticBatch(spec: ModelSpec, batch: number, seed = 0x2545f491): SyntheticBatch {
  let state = seed;
  const next = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 4294967296;
  };
  if (isTransformer(spec)) {
    const windows = Uint32Array.from({ length: batch * (spec.context + 1) }, () => Math.floor(next() * spec.vocab));
    return { x: new Float32Array(0), labels: new Uint32Array(0), windows };
  }
  const inputs = spec.input.reduce((a, b) => a * b, 1);
  const x = Float32Array.from({ length: batch * inputs }, next);
  const labels = Uint32Array.from({ length: batch }, () => Math.floor(next() * spec.classes));
  return { x, labels, windows: new Uint32Array(0) };
}

function upload(model: Model, batch: SyntheticBatch): void {
  if (batch.windows.length) model.setTokens(batch.windows, model.maxBatch);
  else model.setBatch(batch.x, batch.labels, model.maxBatch);
}

/** The bits of one step: gradient sums and loss of the batch, then the parameters after one optimizer step. */
async function stepBits(model: Model, batch: SyntheticBatch): Promise<Uint32Array> {
  upload(model, batch);
  const encoder = model.gpu.device.createCommandEncoder({ label: 'autotune.check' });
  model.recordForwardBackward(encoder);
  model.gpu.device.queue.submit([encoder.finish()]);
  const grads = await model.readGradients();
  const loss = await model.readLossSum();
  model.applyOptimizer(model.maxBatch);
  const params = await model.readParams();
  const bits = new Uint32Array(grads.length + 1 + params.length);
  bits.set(new Uint32Array(grads.buffer, grads.byteOffset, grads.length));
  bits[grads.length] = new Uint32Array(Float32Array.of(loss).buffer)[0];
  bits.set(new Uint32Array(params.buffer, params.byteOffset, params.length), grads.length + 1);
  return bits;
}

function sameBits(a: Uint32Array, b: Uint32Array): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

/** The family's dispatches of one training step, timed; `calls` 0 when the model has none. */
async function timeFamily(
  model: Model,
  family: Family,
  batch: SyntheticBatch,
  minMs: number,
): Promise<{ ms: number; calls: number; flops: number }> {
  const calls = model.trainStepCalls.filter((c) => FAMILY_LABEL[family].test(c.label));
  if (calls.length === 0) return { ms: 0, calls: 0, flops: 0 };
  upload(model, batch);
  const ms = await timeCalls(model.gpu, calls, minMs);
  return { ms, calls: calls.length, flops: calls.reduce((sum, c) => sum + (c.flops ?? 0), 0) };
}

/**
 * Milliseconds of one pass of `calls`: a warm-up pass, then passes repeated in one submission until a
 * sample lasts `minMs`; the better of two samples (a sample is the submission's wall time to idle).
 */
export async function timeCalls(gpu: Gpu, calls: readonly KernelCall[], minMs: number): Promise<number> {
  const run = async (reps: number): Promise<number> => {
    const encoder = gpu.device.createCommandEncoder({ label: 'autotune.time' });
    for (let r = 0; r < reps; r++) recordCalls(encoder, calls, 'autotune.time');
    const t0 = performance.now();
    gpu.device.queue.submit([encoder.finish()]);
    await gpu.device.queue.onSubmittedWorkDone();
    return (performance.now() - t0) / reps;
  };
  const first = await run(1);
  const reps = Math.min(200, Math.max(1, Math.ceil(minMs / Math.max(first, 0.01))));
  return Math.min(await run(reps), await run(reps));
}

/**
 * Build a model with `variants`, run `fn` on it inside validation and internal error scopes, free it.
 * A pipeline that fails to compile or validate gives `error` (the candidate is refused), not a throw.
 */
async function withModel<T>(
  gpu: Gpu,
  req: TuneRequest,
  variants: KernelVariants,
  fn: (model: Model) => Promise<T>,
): Promise<{ value?: T; error?: string }> {
  const device = gpu.device;
  device.pushErrorScope('internal');
  device.pushErrorScope('validation');
  let model: Model | undefined;
  let value: T | undefined;
  let thrown: string | undefined;
  try {
    model = createModel(gpu, req.spec, req.layout, {
      maxBatch: req.maxBatch,
      optimizer: req.optimizer,
      variants,
      precision: req.precision,
    });
    value = await fn(model);
  } catch (err) {
    thrown = (err as Error).message;
  } finally {
    model?.destroy();
  }
  const errors = [await device.popErrorScope(), await device.popErrorScope()].filter((e) => e !== null);
  const error = thrown ?? (errors.length > 0 ? errors.map((e) => e!.message).join('; ') : undefined);
  return error ? { error } : { value };
}
