/**
 * A user's dataset as the training worker sees it (`TrainingData`, batches.ts), read from the
 * coordinator's chunks (coordinator/datasets/dataset-chunks.ts) through a `ChunkFetcher`: a step's `prepare`
 * downloads (or takes from the cache) only the chunks its samples touch, `gather` then copies them
 * synchronously.
 *
 * - tensors: sample i is row i of `train/x` (float32 features) and `train/y` (u32 label).
 * - text: sample i is the window of bytes [i, i + context + 1) of `train`; `x` its first `context`
 *   bytes as u32 tokens, `labels` its last `context` (the next byte at each position). The test set is
 *   the held-out text cut into non-overlapping windows (window k starts at k·context), so an
 *   evaluation of n windows reads n·context + 1 contiguous bytes and scores every one of them once.
 */
import type {
  ChunkedDatasetMetadata,
  ChunkedPayload,
  TensorsDatasetMetadata,
  TextDatasetMetadata,
} from '../../../core/data/chunked-dataset';
import { splitWindows } from '../../../core/data/text-windows';
import type { ChunkFetcher } from './dataset-client';
import { type Batch, type BatchSource, checkIndex, type TrainingData } from './batches';

/** The chunk indices of `file` that bytes [start, end) touch, added to `into`. */
function chunksOf(file: ChunkedPayload, start: number, end: number, into: Set<number>): void {
  for (let i = Math.floor(start / file.chunkBytes); i * file.chunkBytes < end; i++) into.add(i);
}

/**
 * Samples of `rowBytes[f]` bytes each in the payloads `files`, read by index: sample i's bytes in
 * payload f start at i·`stride[f]` (default the row: stride = rowBytes; text windows overlap, stride 1).
 */
class RowBatches implements BatchSource {
  private readonly out: Uint8Array[];

  constructor(
    private readonly fetcher: ChunkFetcher,
    private readonly files: ChunkedPayload[],
    private readonly rowBytes: number[],
    private readonly count: number,
    private readonly maxBatch: number,
    /** Turns the gathered bytes of each payload into the batch. */
    private readonly assemble: (out: Uint8Array[], batch: number) => Batch,
    private readonly stride = rowBytes,
  ) {
    this.out = rowBytes.map((b) => new Uint8Array(b * maxBatch));
  }

  prepare(indices: ArrayLike<number>, start = 0, count = indices.length - start): Promise<void> | null {
    const wanted = this.files.map((file, f) => {
      const chunks = new Set<number>();
      for (let b = 0; b < count; b++) {
        const index = indices[start + b];
        checkIndex(index, this.count);
        const from = index * this.stride[f];
        chunksOf(file, from, from + this.rowBytes[f], chunks);
      }
      return { file, chunks };
    });
    return this.fetcher.ensure(wanted);
  }

  gather(indices: ArrayLike<number>, start = 0, count = indices.length - start): Batch {
    if (count > this.maxBatch) throw new Error(`batch of ${count} exceeds the maximum ${this.maxBatch}`);
    this.files.forEach((file, f) => {
      const rowBytes = this.rowBytes[f];
      for (let b = 0; b < count; b++) {
        const index = indices[start + b];
        checkIndex(index, this.count);
        const from = index * this.stride[f];
        this.fetcher.copy(file, from, from + rowBytes, this.out[f], b * rowBytes);
      }
    });
    return this.assemble(this.out, count);
  }
}

function tensorsData(meta: TensorsDatasetMetadata, fetcher: ChunkFetcher): TrainingData {
  const features = meta.shape[0] * meta.shape[1] * meta.shape[2];
  const { files } = meta;
  return {
    kind: 'tensors',
    trainCount: meta.train.count,
    testCount: meta.test.count,
    batches: (maxBatch) =>
      new RowBatches(
        fetcher,
        [files['train/x'], files['train/y']],
        [features * 4, 4],
        meta.train.count,
        maxBatch,
        ([x, y], batch) => ({
          x: new Float32Array(x.buffer, 0, batch * features),
          labels: new Uint32Array(y.buffer, 0, batch),
          batch,
        }),
      ),
    async testSet(count) {
      const n = Math.min(count, meta.test.count);
      const [x, y] = await Promise.all([
        fetcher.range(files['test/x'], 0, n * features * 4),
        fetcher.range(files['test/y'], 0, n * 4),
      ]);
      return { x: new Float32Array(x.buffer), labels: new Uint32Array(y.buffer), count: n, positions: 1, bytes: false };
    },
  };
}

function textData(meta: TextDatasetMetadata, fetcher: ChunkFetcher): TrainingData {
  const T = meta.context;
  const testWindows = Math.floor((meta.test.bytes - 1) / T);
  return {
    kind: 'text',
    context: T,
    trainCount: meta.train.count,
    testCount: testWindows,
    batches(maxBatch) {
      const x = new Uint32Array(maxBatch * T);
      const labels = new Uint32Array(maxBatch * T);
      return new RowBatches(
        fetcher,
        [meta.files.train],
        [T + 1],
        meta.train.count,
        maxBatch,
        ([windows], batch) => {
          splitWindows(windows, batch, T, x, labels);
          return { x: x.subarray(0, batch * T), labels: labels.subarray(0, batch * T), batch };
        },
        [1],
      );
    },
    async testSet(count) {
      const n = Math.min(count, testWindows);
      const text = await fetcher.range(meta.files.test, 0, n * T + 1);
      // Window k is bytes [kT, kT + T + 1): position j's input is text[kT + j], its target text[kT + j + 1].
      const out = { x: Uint32Array.from(text.subarray(0, n * T)), labels: Uint32Array.from(text.subarray(1)) };
      return { ...out, count: n, positions: T, bytes: true };
    },
  };
}

/** The training worker's view of a chunked dataset. */
export function chunkedData(meta: ChunkedDatasetMetadata, fetcher: ChunkFetcher): TrainingData {
  return meta.kind === 'text' ? textData(meta, fetcher) : tensorsData(meta, fetcher);
}
