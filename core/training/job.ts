/**
 * The job: what is trained, on what, how, and with how many tabs. Validated with zod (with defaults) so
 * a job file, the default job and the CLI all go through one gate; the model is resolved to a full
 * `ModelSpec` here, so everything downstream (the machine, the tabs) sees one concrete spec.
 */
import { z } from 'zod';
import { modelSpecSchema, resolveModelSpec, type ModelSpec } from './model-spec';

const finite = z.number();

export const adamwSchema = z.strictObject({
  kind: z.literal('adamw'),
  /** Learning rate. */
  lr: finite.positive().max(10),
  /** First-moment decay. */
  beta1: finite.min(0).lt(1).default(0.9),
  /** Second-moment decay. */
  beta2: finite.min(0).lt(1).default(0.999),
  /** Denominator epsilon. */
  eps: finite.positive().max(1).default(1e-8),
  /** Decoupled weight decay (AdamW), applied as `w -= lr·weightDecay·w`. */
  weightDecay: finite.min(0).max(10).default(0.01),
});

export const sgdSchema = z.strictObject({
  kind: z.literal('sgd'),
  /** Learning rate. */
  lr: finite.positive().max(10),
  /** Heavy-ball momentum; 0 is plain SGD. */
  momentum: finite.min(0).lt(1).default(0),
});

export const optimizerSchema = z.discriminatedUnion('kind', [adamwSchema, sgdSchema]);
export type OptimizerSpec = z.infer<typeof optimizerSchema>;

const subsetField = z
  .int()
  .min(1)
  .max(1 << 30)
  .optional();

/** A server-side file or folder of a user dataset. */
const pathField = z.string().min(1).max(4096);

/** The built-in IDX image set (Fashion-MNIST by default). */
export const idxDatasetSchema = z.strictObject({
  /** Dataset name; the server maps it to files (Fashion-MNIST IDX by default). */
  name: z.string().min(1).max(64).default('fashion-mnist'),
  /** Use only the first N training samples (indices 0..N-1); the epoch order permutes those. */
  subset: subsetField,
});

/** UTF-8 text as byte tokens for a transformer; samples are window starts (coordinator/datasets/user-datasets.ts). */
export const textDatasetSchema = z.strictObject({
  kind: z.literal('text'),
  /** A file, or a folder whose regular files are joined in name order. */
  path: pathField,
  /** Held-out text; without it the last 5% of the bytes is held out. */
  testPath: pathField.optional(),
  /** Folder files ending in one of these are left out (e.g. [".dat"]). */
  skip: z.array(z.string().min(1).max(64)).max(16).optional(),
  name: z.string().min(1).max(64).default('text'),
  subset: subsetField,
});

/** A `.safetensors` file with `x` (F32 or U8 rows) and `y` (integer labels), or a folder of x.npy and y.npy. */
export const tensorsDatasetSchema = z.strictObject({
  kind: z.literal('tensors'),
  path: pathField,
  testPath: pathField.optional(),
  name: z.string().min(1).max(64).default('tensors'),
  subset: subsetField,
});

/** Wire format of the ring allreduce: float32 (exact), IEEE half, or int8 in blocks with a float32 scale. */
export const compressionSchema = z.enum(['none', 'fp16', 'int8']);
export type Compression = z.infer<typeof compressionSchema>;

/**
 * Every step is one allreduce of the gradient sums (today's semantics). With `compression` other than
 * `none` every rank still ends each step with the same bytes, but the result is no longer bit-equal to
 * a single tab's (see docs/local-steps.md).
 */
export const everyStepSyncSchema = z.strictObject({
  mode: z.literal('every-step'),
  compression: compressionSchema.default('none'),
});

/** Nesterov SGD on the pseudo-gradient, as DiLoCo's outer optimizer (PyTorch's `nesterov=True` form). */
export const outerOptimizerSchema = z.strictObject({
  kind: z.literal('nesterov'),
  lr: finite.positive().max(10).default(0.7),
  momentum: finite.min(0).lt(1).default(0.9),
});

/**
 * Local steps (DiLoCo): each rank takes `innerSteps` optimizer steps on its own slices, then the ranks
 * allreduce their sample-weighted pseudo-gradients (committed − local parameters) and the outer
 * optimizer updates the committed state. The outer step is the commit point (docs/local-steps.md).
 */
export const localSyncSchema = z.strictObject({
  mode: z.literal('local'),
  /** Inner steps per outer step (H); an epoch's end also ends an outer step. */
  innerSteps: z.int().min(1).max(100_000),
  outer: outerOptimizerSchema.default({ kind: 'nesterov', lr: 0.7, momentum: 0.9 }),
  compression: compressionSchema.default('none'),
  /**
   * Overlapped outer steps: each outer step's allreduce runs while the ranks compute the next outer step's
   * inner steps, and the outer update lands one outer step late (an eager update after Kale et al. 2025,
   * anchored at the consensus; core/training/overlap.ts, docs/local-steps.md "Overlapped outer steps").
   * Off by default.
   */
  overlap: z.boolean().default(false),
});

export const syncSchema = z.discriminatedUnion('mode', [everyStepSyncSchema, localSyncSchema]);
export type SyncSpec = z.infer<typeof syncSchema>;
export type LocalSync = z.infer<typeof localSyncSchema>;

/**
 * Checking contributions (docs/threat-model.md): every step report carries sketches of the rank's own
 * contribution, of the all-reduced sum and of the new state (core/state/sketch.ts), checked at every
 * commit; and a trusted verifier beside the coordinator recomputes drawn commits from the state before
 * them: every rank's step in every-step mode, one rank's outer step in local mode. Every model, dataset
 * and wire a job accepts is covered; every-step mode needs a commit every step (a check recomputes one
 * step). A job open to anyone verifies unless its file says `"verify": false` (`withVerifyDefault`).
 */
export const verifySchema = z.strictObject({
  /** Chance that a commit of trusted workers is recomputed (0: sketches and the ring checks only). */
  probability: finite.min(0).max(1).default(0.05),
  /**
   * A worker is checked at `newcomer.probability` per commit until it passed `newcomer.checks` checks
   * (coordinator/machine/adaptive-trust.ts: BOINC's adaptive replication).
   */
  newcomer: z
    .strictObject({
      probability: finite.min(0).max(1).default(0.5),
      checks: z.int().min(0).max(1_000_000).default(10),
    })
    .default({ probability: 0.5, checks: 10 }),
});
export type VerifySpec = z.infer<typeof verifySchema>;

/**
 * Checks do not cover overlapped outer steps (their committed state arrives in `outer_report`, after the
 * next group's inner steps began): such a job must say `"verify": false`, so an open swarm never runs
 * one unchecked by mistake.
 */
export const VERIFY_OVERLAP_REFUSED =
  'verify does not cover sync.overlap (overlapped outer steps): leave overlap out, or set "verify": false (trusted tabs only)';

/**
 * How the tabs' WGSL kernels run (docs/gpu.md). `precision` 'f16' stores every matmul's operands
 * (activations and weight copies) as IEEE halves, with float32 products and sums, master weights,
 * gradients and optimizer state; 'f32' (the default) is the reference. `tune`: when a tab times the
 * kernel variants for its adapter at its first start (cached after): on a hardware GPU ('gpu', the
 * default; a software adapter keeps the hand-measured defaults), on any adapter ('always'), never.
 * The variants give the same bits whatever is chosen, so `tune` never changes a run's numbers.
 */
export const kernelsSchema = z.strictObject({
  precision: z.enum(['f32', 'f16']).default('f32'),
  tune: z.enum(['gpu', 'always', 'never']).default('gpu'),
});
export type KernelsSpec = z.infer<typeof kernelsSchema>;
export const DEFAULT_KERNELS: KernelsSpec = { precision: 'f32', tune: 'gpu' };

export const datasetSpecSchema = z.union([textDatasetSchema, tensorsDatasetSchema, idxDatasetSchema]);

const modelField = z
  .union([z.string().min(1).max(64), modelSpecSchema])
  .default('mlp')
  .transform((model, ctx): ModelSpec => {
    try {
      return resolveModelSpec(model);
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: (err as Error).message });
      return z.NEVER;
    }
  });

export const jobSpecSchema = z
  .strictObject({
    /** A built-in model name (`mlp`, `cnn`, `tiny-mlp`) or an inline spec; resolved to a spec. */
    model: modelField,
    dataset: datasetSpecSchema.default({ name: 'fashion-mnist' }),
    optimizer: optimizerSchema.default({
      kind: 'adamw',
      lr: 1e-3,
      beta1: 0.9,
      beta2: 0.999,
      eps: 1e-8,
      weightDecay: 0.01,
    }),
    /** Samples per step, whatever the world size (split across ranks by share). */
    globalBatch: z
      .int()
      .min(1)
      .max(1 << 20)
      .default(128),
    epochs: z.int().min(1).max(100_000).default(1),
    /** A round starts once this many workers joined (after the last-call window). */
    minWorkers: z.int().min(1).max(4096).default(1),
    /** A round never has more ranks than this; later joiners wait. */
    maxWorkers: z.int().min(1).max(4096).default(8),
    /**
     * Steps per commit group (core/training/groups.ts); an epoch's end also ends a group. In local sync
     * mode it is the outer step (`sync.innerSteps`), and a job file may not set it to anything else.
     */
    commitEvery: z.int().min(1).max(100_000).optional(),
    /** How the ranks combine their work: every step (default) or local steps with rare outer syncs. */
    sync: syncSchema.default({ mode: 'every-step', compression: 'none' }),
    /**
     * Check contributions (sketches, ring checks, recomputed spot checks). `false`: trust the ranks (a
     * private swarm; the coordinator warns at start). Absent: on where anyone may join (`--join open`),
     * off for invited tabs (`withVerifyDefault`).
     */
    verify: z.union([verifySchema, z.literal(false)]).optional(),
    /**
     * How a round's ranks are arranged (core/training/topology.ts): `ring` (the default), one ring ordered
     * by the measured link RTTs; `auto`, the planner's choice, rings in groups where they cut the latency
     * (web/net/group-allreduce.ts); `groups`, rings in groups whenever a round has 4 members or more,
     * whatever the planner's latency estimate says (to measure or test grouped rounds, or where the
     * estimate is known to be wrong). Groups are opt-in (docs/networking.md says why).
     */
    topology: z.enum(['ring', 'auto', 'groups']).default('ring'),
    /** Kernel precision and per-adapter tuning (docs/gpu.md). */
    kernels: kernelsSchema.default(DEFAULT_KERNELS),
    /** Committed steps between durable checkpoints (also taken at epoch ends and at the end). */
    checkpointEvery: z.int().min(1).max(10_000_000).default(50),
    /** Failure restarts tolerated; one more fails the job. Joins and goodbyes never count. */
    maxRestarts: z.int().min(0).max(1_000_000).default(100),
    /** Heartbeat period; a worker silent for 3× this is declared failed. */
    heartbeatMs: z.int().min(10).max(600_000).default(2000),
    /** After minWorkers joined, wait this long for more before completing a round. */
    lastCallMs: z.int().min(0).max(600_000).default(1000),
    /** Seed of the epoch orders and of the initial parameters. */
    seed: z.int().min(0).max(0xffffffff).default(42),
    /**
     * Rank 0 evaluates the committed state on the test set every this many committed steps (at the first
     * commit point at or after each multiple) and at the end of the job; null: at each epoch end and at the end.
     */
    evalEvery: z.int().min(1).max(10_000_000).nullable().default(null),
    /** Test images per evaluation: the first N of the test set (all of it if smaller); 0 turns evaluation off. */
    evalSamples: z
      .int()
      .min(0)
      .max(1 << 24)
      .default(2000),
  })
  .refine((job) => job.minWorkers <= job.maxWorkers, {
    message: 'minWorkers must be <= maxWorkers',
    path: ['minWorkers'],
  })
  .refine(
    (job) => job.sync.mode !== 'local' || job.commitEvery === undefined || job.commitEvery === job.sync.innerSteps,
    {
      message: 'in local sync mode the outer step is the commit point: leave commitEvery out (it is sync.innerSteps)',
      path: ['commitEvery'],
    },
  )
  .refine((job) => !job.verify || job.sync.mode === 'local' || (job.commitEvery ?? 1) === 1, {
    message: 'verify in every-step sync needs commitEvery 1 (a check recomputes one step): leave commitEvery out',
    path: ['verify'],
  })
  .refine((job) => !job.verify || !(job.sync.mode === 'local' && job.sync.overlap), {
    message: VERIFY_OVERLAP_REFUSED,
    path: ['verify'],
  })
  .transform((job) => ({
    ...job,
    commitEvery: job.sync.mode === 'local' ? job.sync.innerSteps : (job.commitEvery ?? 1),
  }));

/** A validated job with every default filled in and the model resolved. */
export type JobSpec = z.output<typeof jobSpecSchema>;
/** What a job file may contain (every field optional). */
export type JobSpecInput = z.input<typeof jobSpecSchema>;

/** Validate a job (e.g. a parsed job file); throws one readable line listing every problem. */
export function parseJobSpec(input: unknown): JobSpec {
  const parsed = jobSpecSchema.safeParse(input);
  if (!parsed.success) {
    throw new Error(
      `invalid job: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(job)'}: ${i.message}`).join('; ')}`,
    );
  }
  return parsed.data;
}

/** The job's `verify` settings when it verifies contributions, else null (absent, or `false`). */
export function verifying(job: Pick<JobSpec, 'verify'>): VerifySpec | null {
  return job.verify ? job.verify : null;
}

/**
 * The job as a coordinator runs it: a job that does not say (`verify` absent) verifies where anyone
 * may join (`open`) with the defaults of `verifySchema`, and trusts invited tabs (`invite`). An explicit
 * `"verify": false` stays off in both.
 */
export function withVerifyDefault(job: JobSpec, join: 'open' | 'invite'): JobSpec {
  if (job.verify !== undefined || join !== 'open') return job;
  if (job.sync.mode === 'local' && job.sync.overlap)
    throw new Error(`invalid job for --join open: ${VERIFY_OVERLAP_REFUSED}`);
  return { ...job, verify: verifySchema.parse({}) };
}

/** The default job: Fashion-MNIST, `mlp`, AdamW lr 1e-3, global batch 128, one epoch. */
export const defaultJob: JobSpec = parseJobSpec({});

/** Training images actually used: the dataset's size, or the job's `dataset.subset` if smaller. */
export function effectiveDatasetSize(job: JobSpec, datasetSize: number): number {
  return Math.min(job.dataset.subset ?? datasetSize, datasetSize);
}

/**
 * What a tab needs to train: sent in `welcome`. Field names match `StepPlan` (core/training/groups.ts)
 * so a tab can call `groupPlan(position, step, job)` with it directly.
 */
export const jobPublicSchema = z.strictObject({
  model: modelSpecSchema,
  /** Dataset name (the tab fetches it from the coordinator). */
  dataset: z.string().min(1).max(64),
  /** Training images in use (after `subset`): the epoch order permutes 0..datasetSize-1. */
  datasetSize: z.int().min(1),
  optimizer: optimizerSchema,
  globalBatch: z.int().min(1),
  epochs: z.int().min(1),
  /** Steps per commit group (core/training/groups.ts). In local sync mode, the inner steps of an outer step. */
  commitEvery: z.int().min(1),
  sync: syncSchema,
  /** Whether ranks sketch their contributions (and how often the coordinator recomputes a step). */
  verify: verifySchema.optional(),
  /** Kernel precision and when a tab tunes its kernels (`kernelsSchema`). */
  kernels: kernelsSchema.default(DEFAULT_KERNELS),
  checkpointEvery: z.int().min(1),
  /** Send a heartbeat this often (ms). */
  heartbeatMs: z.int().min(1),
  /** Seed of the epoch orders and of the initial parameters (a fresh start initialises from it). */
  seed: z.int().min(0).max(0xffffffff),
  /** ceil(datasetSize / globalBatch). */
  stepsPerEpoch: z.int().min(1),
  /**
   * epochs · stepsPerEpoch: the job's steps if no outer step is ever committed partially. An estimate for
   * progress bars: the job ends when the record passes its last epoch (`done`), which the steps that serve
   * a partial commit's holes delay.
   */
  totalSteps: z.int().min(1),
  /** Committed steps between test-set evaluations by rank 0, or null (epoch ends); see `isEvaluationCommit`. */
  evalEvery: z.int().min(1).nullable(),
  /** Test images per evaluation (first N of the test set); 0: no evaluation. */
  evalSamples: z.int().min(0),
});
export type JobPublic = z.infer<typeof jobPublicSchema>;

/** The public view of a job over `datasetSize` training images (the full set; `subset` is applied here). */
export function jobPublic(job: JobSpec, datasetSize: number): JobPublic {
  const n = effectiveDatasetSize(job, datasetSize);
  const stepsPerEpoch = Math.ceil(n / job.globalBatch);
  return {
    model: job.model,
    dataset: job.dataset.name,
    datasetSize: n,
    optimizer: job.optimizer,
    globalBatch: job.globalBatch,
    epochs: job.epochs,
    commitEvery: job.commitEvery,
    sync: job.sync,
    ...(job.verify ? { verify: job.verify } : {}),
    kernels: job.kernels,
    checkpointEvery: job.checkpointEvery,
    heartbeatMs: job.heartbeatMs,
    seed: job.seed,
    stepsPerEpoch,
    totalSteps: stepsPerEpoch * job.epochs,
    evalEvery: job.evalEvery,
    evalSamples: job.evalSamples,
  };
}
