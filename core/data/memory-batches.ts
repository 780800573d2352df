/**
 * The batches of a user's dataset held in memory: a tensors set's rows and labels, a text's byte windows.
 * The verifier reads the training data this way (the coordinator hands it the bytes it serves); the
 * tabs read the same bytes in chunks (web/worker/data/chunked-data.ts), and both assemble a sample
 * alike — a row of float32 features and its u32 label; the window [i, i + context + 1) split by
 * `splitWindows` — so a recomputed gradient sees exactly the inputs the tab's did.
 */
import { type Batch, type BatchSource, checkIndex } from './image-batches';
import { splitWindows } from './text-windows';

/** Rows of `features` float32 values (`x`, row-major) with one u32 label each (`y`). */
export class TensorBatches implements BatchSource {
  private readonly x: Float32Array;
  private readonly labels: Uint32Array;
  readonly count: number;

  constructor(
    private readonly rows: { x: Float32Array; y: Uint32Array; features: number },
    readonly maxBatch: number,
  ) {
    this.count = rows.y.length;
    if (rows.x.length !== this.count * rows.features)
      throw new Error(`tensors: ${rows.x.length} values are not ${this.count} rows of ${rows.features}`);
    this.x = new Float32Array(maxBatch * rows.features);
    this.labels = new Uint32Array(maxBatch);
  }

  prepare(): null {
    return null;
  }

  gather(indices: ArrayLike<number>, start = 0, count = indices.length - start): Batch {
    if (count > this.maxBatch) throw new Error(`batch of ${count} exceeds the maximum ${this.maxBatch}`);
    const f = this.rows.features;
    for (let b = 0; b < count; b++) {
      const index = indices[start + b];
      checkIndex(index, this.count);
      this.x.set(this.rows.x.subarray(index * f, (index + 1) * f), b * f);
      this.labels[b] = this.rows.y[index];
    }
    return { x: this.x.subarray(0, count * f), labels: this.labels.subarray(0, count), batch: count };
  }
}

/** A text's training bytes as a language model's samples: sample i is the window [i, i + context + 1). */
export class TextBatches implements BatchSource {
  private readonly windows: Uint8Array;
  private readonly x: Uint32Array;
  private readonly labels: Uint32Array;
  /** Window starts: bytes − context. */
  readonly count: number;

  constructor(
    private readonly bytes: Uint8Array,
    private readonly context: number,
    readonly maxBatch: number,
  ) {
    this.count = Math.max(0, bytes.length - context);
    this.windows = new Uint8Array(maxBatch * (context + 1));
    this.x = new Uint32Array(maxBatch * context);
    this.labels = new Uint32Array(maxBatch * context);
  }

  prepare(): null {
    return null;
  }

  gather(indices: ArrayLike<number>, start = 0, count = indices.length - start): Batch {
    if (count > this.maxBatch) throw new Error(`batch of ${count} exceeds the maximum ${this.maxBatch}`);
    const w = this.context + 1;
    for (let b = 0; b < count; b++) {
      const index = indices[start + b];
      checkIndex(index, this.count);
      this.windows.set(this.bytes.subarray(index, index + w), b * w);
    }
    splitWindows(this.windows, count, this.context, this.x, this.labels);
    const n = count * this.context;
    return { x: this.x.subarray(0, n), labels: this.labels.subarray(0, n), batch: count };
  }
}
