/**
 * How a step's samples of an IDX image set become a model's input, written once for the two places that
 * compute gradients: the tabs (web/worker/data/batches.ts) and the coordinator's verifier (verifier/), which
 * recomputes a rank's gradient sums and must feed the model exactly the floats the tab fed it.
 *
 * `x` = pixels/255 as float32 NHWC (channels 1), `labels` one u32 class per sample. Pure: plain arrays in,
 * plain arrays out, nothing from the DOM or Node.
 */

export interface Batch {
  /** Classifiers: float32 features; language models: u32 token ids. */
  x: Float32Array | Uint32Array;
  labels: Uint32Array;
  batch: number;
}

export interface BatchSource {
  /** Fetch what `indices[start .. start+count)` need; null when they are already at hand. */
  prepare(indices: ArrayLike<number>, start?: number, count?: number): Promise<void> | null;
  /** The batch of `indices[start .. start+count)` (prepared); views into reused storage, valid until the next call. */
  gather(indices: ArrayLike<number>, start?: number, count?: number): Batch;
}

/** One split of an IDX image set: flat bytes (images count·rows·cols, row-major; labels count). */
export interface ImageSplitBytes {
  images: Uint8Array;
  labels: Uint8Array;
  count: number;
  rows: number;
  cols: number;
}

/** Throws unless `index` names one of `n` samples. */
export function checkIndex(index: number, n: number): void {
  if (!(Number.isInteger(index) && index >= 0 && index < n)) throw new Error(`sample index ${index} outside [0, ${n})`);
}

/** The batches of an image split, in storage allocated once for `maxBatch` samples and reused. */
export class ImageBatches implements BatchSource {
  readonly pixels: number;
  private readonly x: Float32Array;
  private readonly labels: Uint32Array;

  constructor(
    readonly split: ImageSplitBytes,
    readonly maxBatch: number,
  ) {
    this.pixels = split.rows * split.cols;
    this.x = new Float32Array(maxBatch * this.pixels);
    this.labels = new Uint32Array(maxBatch);
  }

  prepare(): null {
    return null;
  }

  gather(indices: ArrayLike<number>, start = 0, count = indices.length - start): Batch {
    if (count > this.maxBatch) throw new Error(`batch of ${count} exceeds the maximum ${this.maxBatch}`);
    const { images, labels, count: n } = this.split;
    const p = this.pixels;
    for (let b = 0; b < count; b++) {
      const index = indices[start + b];
      checkIndex(index, n);
      const src = index * p;
      const dst = b * p;
      for (let i = 0; i < p; i++) this.x[dst + i] = images[src + i] / 255;
      this.labels[b] = labels[index];
    }
    return { x: this.x.subarray(0, count * p), labels: this.labels.subarray(0, count), batch: count };
  }
}
