/**
 * The training worker's data, one interface for the three dataset kinds (docs/models-and-data.md):
 * a `TrainingData` gives a `BatchSource` per maximum batch and the test set. Given the sample indices
 * of a step, a batch source yields the model's input and labels:
 *
 * - images (IDX): `x` = pixels/255 as float32 NHWC (channels 1), `labels` one u32 class per sample;
 * - tensors: `x` = the sample's row of float32 features, `labels` its u32 class (web/worker/data/chunked-data.ts);
 * - text: a sample index is a window start; `x` = `context` byte tokens as u32, `labels` the
 *   `context` next bytes (web/worker/data/chunked-data.ts).
 *
 * `prepare` makes the samples' bytes available (a chunked dataset downloads the chunks they touch) and
 * returns null when there is nothing to wait for; `gather` is synchronous, so the step code that calls it
 * (elastic-steps.ts, solo-loop.ts) records the GPU work without an await in between. The arrays are
 * allocated once per maximum batch and reused (the training loop calls this hundreds of times per epoch).
 */
import { type BatchSource, ImageBatches } from '../../../core/data/image-batches';
import type { DatasetBytes } from '../types';

// The image batches are shared with the coordinator's verifier, which must feed a model the same floats.
export { type Batch, type BatchSource, checkIndex, ImageBatches } from '../../../core/data/image-batches';

/** The name elastic-steps.ts and solo-loop.ts know the batch source by. */
export type BatchAssembler = BatchSource;

/** The first `count` test samples as the model takes them; `positions` predictions per sample (1, or context). */
export interface TestSet {
  x: Float32Array | Uint32Array;
  labels: Uint32Array;
  count: number;
  positions: number;
  /** Language models: report the loss in bits per byte too. */
  bytes: boolean;
}

export interface TrainingData {
  readonly kind: 'images' | 'tensors' | 'text';
  /** Text: the window's input length, which must be the model's context. */
  readonly context?: number;
  /** Training samples (text: window starts). */
  readonly trainCount: number;
  /** Test samples an evaluation can use (text: non-overlapping windows of the held-out text). */
  readonly testCount: number;
  batches(maxBatch: number): BatchSource;
  /** The first `count` test samples (at most `testCount`). */
  testSet(count: number): Promise<TestSet>;
}

/** The IDX image set, all of it in memory (the volunteer page downloads it whole, dataset-client.ts). */
export function imageData(d: DatasetBytes): TrainingData {
  let test: { x: Float32Array; labels: Uint32Array } | undefined;
  return {
    kind: 'images',
    trainCount: d.train.count,
    testCount: d.test.count,
    batches: (maxBatch) => new ImageBatches(d.train, maxBatch),
    async testSet(count) {
      if (!test) {
        const { images, labels } = d.test;
        const x = new Float32Array(images.length);
        for (let i = 0; i < images.length; i++) x[i] = images[i] / 255;
        test = { x, labels: Uint32Array.from(labels.subarray(0, d.test.count)) };
      }
      return { ...test, count: Math.min(count, d.test.count), positions: 1, bytes: false };
    },
  };
}
