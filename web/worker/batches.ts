/**
 * Turning dataset bytes into model inputs: a batch is `x` = pixels/255 as float32 NHWC (channels 1,
 * so row-major pixels) and `labels` as u32, gathered by sample index. The arrays are allocated once
 * per maximum batch and reused (the training loop calls this hundreds of times per epoch).
 */
import type { DatasetSplitBytes } from './types';

export class BatchAssembler {
  readonly pixels: number;
  private readonly x: Float32Array;
  private readonly labels: Uint32Array;

  constructor(
    readonly split: DatasetSplitBytes,
    readonly maxBatch: number,
  ) {
    this.pixels = split.rows * split.cols;
    this.x = new Float32Array(maxBatch * this.pixels);
    this.labels = new Uint32Array(maxBatch);
  }

  /**
   * The batch of the samples `indices[start .. start+count)`. Returned arrays are views into reused
   * storage, valid until the next call.
   */
  gather(
    indices: ArrayLike<number>,
    start = 0,
    count = indices.length - start,
  ): { x: Float32Array; labels: Uint32Array; batch: number } {
    if (count > this.maxBatch) throw new Error(`batch of ${count} exceeds the maximum ${this.maxBatch}`);
    const { images, labels, count: n } = this.split;
    const p = this.pixels;
    for (let b = 0; b < count; b++) {
      const index = indices[start + b];
      if (!(index >= 0 && index < n)) throw new Error(`sample index ${index} outside [0, ${n})`);
      const src = index * p;
      const dst = b * p;
      for (let i = 0; i < p; i++) this.x[dst + i] = images[src + i] / 255;
      this.labels[b] = labels[index];
    }
    return { x: this.x.subarray(0, count * p), labels: this.labels.subarray(0, count), batch: count };
  }
}
