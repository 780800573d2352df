/**
 * The messages between the coordinator and its verifier process (verifier/main.ts), over Node's IPC
 * channel with `serialization: 'advanced'` (structured clone: typed arrays travel as they are). One zod
 * schema per direction, parsed by both ends: the coordinator trusts no byte of the child's answers
 * either (a crashed or mismatched child must be a clear error, not a wrong comparison).
 *
 * Conversation: the coordinator sends `init` (the job as its file holds it, where the dataset is); the
 * child answers `ready` (its adapter, and the time one recomputation of a full step took, which sets
 * the default timeout) or `fatal` and exits. Then `recompute` requests, one at a time, each answered by
 * a `result` or an `error` with the request's id; an error leaves the child serving.
 */
import { z } from 'zod';
import type { JobSpec } from '../training/job';
import { isTransformer } from '../training/model-spec';
import { GRADIENT_SKETCH_BUCKETS, PARAMS_SKETCH_BUCKETS } from '../state/sketch';

/**
 * Why the verifier cannot recompute this job's steps, or null. Checked by the coordinator before it
 * starts the verifier and by the verifier itself: it recomputes every-step sync of an image classifier
 * on an IDX image set only.
 */
export function verificationUnsupported(job: Pick<JobSpec, 'dataset' | 'sync' | 'model'>): string | null {
  if ('kind' in job.dataset)
    return `verification of ${job.dataset.kind} datasets is not supported yet (only IDX image sets)`;
  if (job.sync.mode !== 'every-step')
    return `verification recomputes every-step sync only; this job uses ${job.sync.mode} steps`;
  if (isTransformer(job.model)) return `verification of language models (${job.model.name}) is not supported yet`;
  return null;
}

/** Most ranks a step can have (the job's maxWorkers cap). */
const MAX_WORLD = 4096;

const float64s = (max: number) =>
  z
    .custom<Float64Array>((v) => v instanceof Float64Array, 'not a Float64Array')
    .refine((a) => a.length <= max, `more than ${max} values`);
const uint32s = z.custom<Uint32Array>((v) => v instanceof Uint32Array, 'not a Uint32Array');

export const sketchSchema = z
  .strictObject({ values: float64s(GRADIENT_SKETCH_BUCKETS), mass: float64s(GRADIENT_SKETCH_BUCKETS) })
  .refine((s) => s.values.length === s.mass.length, 'values and mass differ in length');

export const verifierInitSchema = z.strictObject({
  type: z.literal('init'),
  /** The job as its file holds it (parsed by the child with the same `parseJobSpec`). */
  job: z.unknown(),
  /** The IDX folder the coordinator serves the tabs from. */
  datasetDir: z.string().min(1).max(4096),
});

export const recomputeRequestSchema = z.strictObject({
  type: z.literal('recompute'),
  id: z.int().min(0),
  /** A snapshot file of θ_{s−1} the coordinator wrote (and verified); the child reads and decodes it. */
  snapshotPath: z.string().min(1).max(4096),
  /** The hash of θ_s the ranks reported (the sketches' seed). */
  stepHash: z.string().regex(/^[0-9a-f]{16,128}$/),
  world: z.int().min(1).max(MAX_WORLD),
  /** Each rank's dataset sample indices. */
  slices: z.array(uint32s).min(1).max(MAX_WORLD),
  /** Samples in the step (the slices' total). */
  count: z.int().min(1),
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
  own: z.array(sketchSchema).max(MAX_WORLD),
  params: sketchSchema.refine((s) => s.values.length === PARAMS_SKETCH_BUCKETS, 'not a parameter sketch'),
  paramsHash: z.string().regex(/^[0-9a-f]{16,128}$/),
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
