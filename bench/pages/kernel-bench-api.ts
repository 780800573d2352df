/**
 * What bench/kernels.ts (Node) and bench/pages/kernels-page.ts (the browser) exchange through
 * `page.evaluate`: plain JSON only. Types only, so both sides can import it.
 */
import type { MatmulTile } from '../../kernels/ops/matmul';

export interface AdapterReport {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  userAgent: string;
  /** What TF.js's WebGPU backend reports for its own device (same adapter, or the bench is void). */
  tfjsAdapter: { vendor: string; architecture: string };
  tfjsVersion: string;
  /** kernels/ops/matmul.ts's DEFAULT_MATMUL_TILE: what the model uses unless told otherwise. */
  defaultTile: MatmulTile;
}

/** A matmul to time: our kernel with `tile`, or (probe) the bench-only interleaved-column shader. */
export interface MatmulVariantSpec {
  tile: MatmulTile;
  interleaved?: boolean;
}

export interface MatmulSetupReport {
  n: number;
  /** max |ours − tfjs| / max |tfjs| over the output, per variant (sanity: both compute the same product). */
  relativeDiff: number[];
}

export interface TrainSetupReport {
  batch: number;
  /** The autotuner's choice (each family's variant), when `autotuneMs` asked for it. */
  autotuned?: string[];
  /** Whether that choice is every default (then both models run the same kernels). */
  autotunedIsDefault?: boolean;
  /** Mean loss over the batch before any step, per tile of ours and TF.js, from the same weights and batch. */
  lossOurs: number[];
  /** Per TF.js form, in `TrainOptions.tfjsForms` order. */
  lossTfjs: number[];
}

export interface TransformerSetupReport {
  batch: number;
  /** The autotuner's choice for gpt-tiny at this batch (ours variant 1; variant 0 is the defaults). */
  autotuned: string[];
  autotunedIsDefault: boolean;
  context: number;
  /** Mean loss per window (nats per token) before any step: ours and TF.js from the same weights and windows. */
  lossOurs: number;
  lossTfjs: number;
}

/**
 * How the TF.js model is written: one tf.fused.matMul (bias + ReLU) per layer, or plain
 * matMul/add/relu. Neither is always faster on every adapter, so the bench runs both.
 */
export type TfjsForm = 'fused' | 'plain';

export interface TrainOptions {
  /** One model of ours per entry; `null` is the kernels' default tile (what the app runs). */
  tiles: (MatmulTile | null)[];
  /**
   * Also one model with the autotuner's choice for this adapter and batch (kernels/tuning/autotune.ts,
   * with this budget in ms), timed after the tiles' (its index is `tiles.length`). 0: none.
   */
  autotuneMs: number;
  /** One TF.js model per entry. */
  tfjsForms: TfjsForm[];
}

/**
 * `ours`: our kernel (matmul) or model (train) with the tile at that index of the setup's list;
 * `tfjs`: TF.js (train: the form at that index of `tfjsForms`; matmul has one form).
 */
export type Side = { side: 'tfjs'; variant: number } | { side: 'ours'; variant: number };

export interface KernelBenchApi {
  init(): Promise<AdapterReport>;
  /** Allocate n×n operands on both sides, prepare one kernel per variant, warm every one up once. */
  matmulSetup(n: number, variants: MatmulVariantSpec[]): Promise<MatmulSetupReport>;
  /** Milliseconds for `runs` back-to-back n×n matmuls on one side, including waiting for the GPU. */
  matmulTime(side: Side, runs: number): Promise<number>;
  matmulTeardown(): Promise<void>;
  /** Build the mlp on both sides with equal weights and batch; two warm-up steps each. */
  trainSetup(batch: number, options: TrainOptions): Promise<TrainSetupReport>;
  /** Milliseconds for `steps` consecutive training steps on one side, including waiting for the GPU. */
  trainTime(side: Side, steps: number): Promise<number>;
  trainTeardown(): Promise<void>;
  /**
   * Probe (`--breakdown`): median milliseconds of each dispatch of our model (tile index `variant`
   * of the last trainSetup) submitted alone, in step order; reads the Model's private call lists.
   */
  trainBreakdown(variant: number, reps: number): Promise<{ label: string; workgroups: number[]; ms: number }[]>;
  /**
   * gpt-tiny on both sides (ours: `Model.trainTokens`; TF.js: the model in TF.js ops of
   * test/support/reference-transformer-tfjs.ts with tf.train.adam), equal weights and `batch` random
   * windows of context + 1 bytes; one warm-up step each.
   */
  /** gpt-tiny on both sides, and ours also with the autotuner's choice (within `autotuneMs`) as variant 1. */
  transformerSetup(batch: number, autotuneMs: number): Promise<TransformerSetupReport>;
  /** Milliseconds for `steps` consecutive transformer training steps on one side (variant 0), including waiting for the GPU. */
  transformerTime(side: Side, steps: number): Promise<number>;
  transformerTeardown(): Promise<void>;
}

declare global {
  interface Window {
    kernelBench?: KernelBenchApi;
  }
}
