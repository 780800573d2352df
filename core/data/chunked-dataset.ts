/**
 * A user's dataset served in chunks: the metadata `GET /api/dataset` answers with and the arithmetic
 * of its layout, shared by the coordinator that serves it (coordinator/datasets/dataset-chunks.ts) and the tab
 * that fetches and checks it (web/worker/data/dataset-client.ts), so the two cannot drift apart.
 */

export interface ChunkedPayload {
  /** URL prefix; chunk i is at `${url}/${i}`. */
  url: string;
  bytes: number;
  chunkBytes: number;
  /** Hex SHA-256 of each chunk, in order. */
  chunks: string[];
}

export type TextPayload = 'train' | 'test';
export type TensorsPayload = 'train/x' | 'train/y' | 'test/x' | 'test/y';

export interface TextDatasetMetadata {
  kind: 'text';
  name: string;
  /** Byte tokens. */
  vocab: 256;
  context: number;
  /** Samples are window starts: `windowCount(bytes, context)` of them. */
  train: { bytes: number; count: number };
  test: { bytes: number; count: number };
  files: Record<TextPayload, ChunkedPayload>;
}

export interface TensorsDatasetMetadata {
  kind: 'tensors';
  name: string;
  classes: number;
  /** Input shape [h, w, c]; x rows are float32, y labels u32 (little-endian). */
  shape: [number, number, number];
  train: { count: number };
  test: { count: number };
  files: Record<TensorsPayload, ChunkedPayload>;
}

export type ChunkedDatasetMetadata = TextDatasetMetadata | TensorsDatasetMetadata;

/**
 * Samples of a text of `bytes` bytes for a model of `context` tokens: sample i is the window
 * [i, i + context + 1), so there are bytes − context of them (none if the text is shorter).
 */
export function windowCount(bytes: number, context: number): number {
  return Math.max(0, bytes - context);
}

/** Chunks a payload of `bytes` bytes is cut into, `chunkBytes` each (the last one shorter). */
export function chunkCount(bytes: number, chunkBytes: number): number {
  return Math.ceil(bytes / chunkBytes);
}

/** Bytes of chunk `i` of a payload of `bytes` bytes: `chunkBytes`, or fewer for the last one. */
export function chunkLength(bytes: number, chunkBytes: number, i: number): number {
  return Math.min(chunkBytes, bytes - i * chunkBytes);
}
