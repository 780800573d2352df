/**
 * The metadata of an IDX image dataset (MNIST, Fashion-MNIST) as `GET /api/dataset` answers with it:
 * what the coordinator's IDX loader (node/idx.ts) serves and the tab's dataset client
 * (web/worker/data/dataset-client.ts) reads, one type for both so the two cannot drift apart.
 *
 * It lives in core/data/ rather than core/protocol/views.ts because it describes a dataset's files
 * (shapes, payload URLs, sizes, hashes), not a view of the coordinator's state, and it is the other
 * answer of the same endpoint as the chunked datasets' metadata next to it (chunked-dataset.ts).
 */

/** The four payloads of an IDX dataset, each served at `/api/dataset/<key>`. */
export type DatasetFileKey = 'train/images' | 'train/labels' | 'test/images' | 'test/labels';

/** What `GET /api/dataset` returns for an IDX dataset. */
export interface DatasetMetadata {
  name: string;
  classes: number;
  /** Input shape [rows, cols, channels]; pixels are unsigned bytes (divide by 255). */
  shape: [number, number, number];
  train: { count: number };
  test: { count: number };
  /** Each payload's URL, byte length, SHA-256 and ETag (the cache key in the browser). */
  files: Record<DatasetFileKey, { url: string; bytes: number; sha256: string; etag: string }>;
}
