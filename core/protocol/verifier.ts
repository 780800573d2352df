/**
 * The messages between the coordinator and its verifier process (verifier/main.ts), over Node's IPC
 * channel with `serialization: 'advanced'` (structured clone: typed arrays travel as they are). One zod
 * schema per direction, parsed by both ends: the coordinator trusts no byte of the child's answers
 * either (a crashed or mismatched child must be a clear error, not a wrong comparison).
 *
 * Conversation: the coordinator sends `init` (the job as its file holds it, its training data: the IDX
 * folder, or a text's or tensors' training bytes); the child answers `ready` (its adapter, and the time
 * one recomputation of a full step took, which sets the default timeout) or `fatal` and exits. Then
 * `recompute` requests, one at a time, each answered by a `result` or an `error` with the request's
 * id; an error leaves the child serving.
 */
import { z } from 'zod';
import { GRADIENT_SKETCH_BUCKETS, PARAMS_SKETCH_BUCKETS } from '../state/sketch';

/** Most ranks a step can have (the job's maxWorkers cap). */
const MAX_WORLD = 4096;
/** Most inner steps one local-mode check recomputes (the job's `sync.innerSteps` cap). */
const MAX_STEPS = 100_000;

const float64s = (max: number) =>
  z
    .custom<Float64Array>((v) => v instanceof Float64Array, 'not a Float64Array')
    .refine((a) => a.length <= max, `more than ${max} values`);
const uint32s = z.custom<Uint32Array>((v) => v instanceof Uint32Array, 'not a Uint32Array');
const uint8s = z.custom<Uint8Array>((v) => v instanceof Uint8Array, 'not a Uint8Array');
const float32s = z.custom<Float32Array>((v) => v instanceof Float32Array, 'not a Float32Array');
const hash = z.string().regex(/^[0-9a-f]{16,128}$/);

export const sketchSchema = z
  .strictObject({ values: float64s(GRADIENT_SKETCH_BUCKETS), mass: float64s(GRADIENT_SKETCH_BUCKETS) })
  .refine((s) => s.values.length === s.mass.length, 'values and mass differ in length');

/**
 * The job's training data as the verifier reads it: the IDX folder the coordinator serves, or the
 * training part of a user's dataset (coordinator/datasets/user-datasets.ts), exactly the bytes the tabs
 * fetch in chunks.
 */
export const verifierDatasetSchema = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('images'), dir: z.string().min(1).max(4096) }),
  z.strictObject({
    kind: z.literal('tensors'),
    /** Row i is x[i·features … (i+1)·features). */
    x: float32s,
    y: uint32s,
    features: z.int().min(1),
  }),
  z.strictObject({ kind: z.literal('text'), bytes: uint8s }),
]);
export type VerifierDataset = z.infer<typeof verifierDatasetSchema>;

export const verifierInitSchema = z.strictObject({
  type: z.literal('init'),
  /** The job as the coordinator runs it (parsed by the child with the same `parseJobSpec`). */
  job: z.unknown(),
  dataset: verifierDatasetSchema,
});

export const recomputeRequestSchema = z.strictObject({
  type: z.literal('recompute'),
  id: z.int().min(0),
  /** A snapshot file of the state the commit started from, written (and hash-checked) by the coordinator. */
  snapshotPath: z.string().min(1).max(4096),
  /** The committed hash of the checked commit (the sketches' seed). */
  stepHash: hash,
  world: z.int().min(1).max(MAX_WORLD),
  /**
   * `every-step`: one step, every rank's gradient and the update; `local`: rank `rank`'s inner steps
   * of one outer step, its pseudo-gradient, its end moments and the outer step's arithmetic.
   */
  mode: z.enum(['every-step', 'local']),
  /** Local mode: the rank checked. */
  rank: z.int().min(0).max(MAX_WORLD).optional(),
  /**
   * The commit's steps: each rank's sample indices (local mode: the checked rank's only, one slice) and
   * the step's samples (every-step: the slices' total).
   */
  steps: z
    .array(z.strictObject({ slices: z.array(uint32s).min(1).max(MAX_WORLD), count: z.int().min(0) }))
    .min(1)
    .max(MAX_STEPS),
  /** The state it started from must be the job's fresh initial state (the commit started at step 0). */
  fresh: z.boolean(),
  /** Local mode: the agreed sketch of the all-reduced pseudo-gradient and its masses (the outer step's input). */
  sum: z
    .strictObject({
      values: z.array(z.number()).max(GRADIENT_SKETCH_BUCKETS),
      mass: z.array(z.number()).max(GRADIENT_SKETCH_BUCKETS),
    })
    .optional(),
  /**
   * Recompute from the start parameters moved by a few roundings (verifier/recompute.ts `perturbed`): the
   * coordinator asks when the first answer contradicts the claims, to learn how far rounding alone moves
   * this commit's result (machine/checks.ts `judge`).
   */
  perturb: z.boolean().optional(),
});

export const verifierRequestSchema = z.discriminatedUnion('type', [verifierInitSchema, recomputeRequestSchema]);

export const verifierReadySchema = z.strictObject({
  type: z.literal('ready'),
  /** The WebGPU adapter, one line. */
  adapter: z.string().max(1000),
  /** One recomputation of a full global batch (one rank), ms, measured after a warm-up. */
  stepMs: z.number().nonnegative(),
});

export const verifierFatalSchema = z.strictObject({
  type: z.literal('fatal'),
  message: z.string().max(10_000),
});

export const recomputeResultSchema = z.strictObject({
  type: z.literal('result'),
  id: z.int().min(0),
  /** Each judged rank's own contribution (every-step: every rank's gradient sums; local: the rank's pseudo-gradient). */
  own: z.array(sketchSchema).max(MAX_WORLD),
  /** The new parameters: every-step `PARAMS_SKETCH_BUCKETS` buckets; local mode the outer step's, in the gradient layout. */
  params: sketchSchema.refine((s) => s.values.length <= Math.max(PARAMS_SKETCH_BUCKETS, GRADIENT_SKETCH_BUCKETS)),
  /** Local mode: the outer momentum after the outer step. */
  outer: sketchSchema.optional(),
  /** Local mode: the rank's optimizer moments after its inner steps. */
  moments: z.array(sketchSchema).max(2).optional(),
  /** false: the uploaded state is not the fresh initial state it had to be. */
  startOk: z.boolean(),
  paramsHash: hash,
  ms: z.number().nonnegative(),
});

export const recomputeErrorSchema = z.strictObject({
  type: z.literal('error'),
  id: z.int().min(0),
  message: z.string().max(10_000),
});

export const verifierAnswerSchema = z.discriminatedUnion('type', [
  verifierReadySchema,
  verifierFatalSchema,
  recomputeResultSchema,
  recomputeErrorSchema,
]);

export type VerifierRequest = z.infer<typeof verifierRequestSchema>;
export type VerifierAnswer = z.infer<typeof verifierAnswerSchema>;
export type RecomputeRequestMessage = z.infer<typeof recomputeRequestSchema>;
export type RecomputeResultMessage = z.infer<typeof recomputeResultSchema>;
