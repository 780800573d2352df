/**
 * The job's dataset for the headless workers of one process, fetched once as a tab fetches it
 * (web/worker/data/dataset-client.ts: `GET /api/dataset`, the files checked against the coordinator's
 * SHA-256) with a file cache in place of Cache Storage (dataset-cache.ts).
 *
 * An IDX image set is copied once into SharedArrayBuffers: each worker's training thread receives views of
 * the same memory (structured cloning shares a SharedArrayBuffer instead of copying it), so K workers in one
 * process hold one copy of the images, not K. A chunked dataset (text, tensors) is handed over as its
 * metadata: each training thread fetches the chunks its steps need, as a tab's worker does.
 */
import type { ChunkedDatasetMetadata } from '../core/data/chunked-dataset';
import {
  chunkedMetadata,
  type DatasetCache,
  fetchDataset,
  fetchDatasetMetadata,
} from '../web/worker/data/dataset-client';
import type { DatasetBytes } from '../web/worker/types';

export type HeadlessDataset =
  | { kind: 'images'; bytes: DatasetBytes; totalBytes: number }
  | { kind: 'chunked'; meta: ChunkedDatasetMetadata };

function shared(bytes: Uint8Array): Uint8Array {
  const copy = new Uint8Array(new SharedArrayBuffer(bytes.byteLength));
  copy.set(bytes);
  return copy;
}

/** Fetch (or read from `cache`) the dataset the coordinator at `origin` serves. */
export async function loadHeadlessDataset(origin: URL, cache: DatasetCache | null): Promise<HeadlessDataset> {
  const base = origin.origin;
  const raw = await fetchDatasetMetadata(base);
  const chunked = chunkedMetadata(raw);
  if (chunked) return { kind: 'chunked', meta: chunked };
  const d = await fetchDataset(base, undefined, raw, cache);
  const bytes: DatasetBytes = {
    ...d,
    train: { ...d.train, images: shared(d.train.images), labels: shared(d.train.labels) },
    test: { ...d.test, images: shared(d.test.images), labels: shared(d.test.labels) },
  };
  const totalBytes = [bytes.train, bytes.test].reduce((n, s) => n + s.images.byteLength + s.labels.byteLength, 0);
  return { kind: 'images', bytes, totalBytes };
}
