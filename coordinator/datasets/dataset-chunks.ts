/**
 * Serving a user's dataset in chunks, so a tab fetches only the byte ranges its slices need (a
 * window of text is context + 1 bytes; a tab's share of an epoch touches a few chunks at a time):
 *
 * - `GET /api/dataset` describes the dataset and, for each payload, its size, the chunk size and every
 *   chunk's SHA-256 (text: `train` and `test` bytes; tensors: `train/x` float32 bytes, `train/y` u32
 *   bytes, and the same for `test`).
 * - `GET /api/dataset/chunks/<payload>/<i>` is chunk i, with its SHA-256 as a strong ETag: a browser
 *   revalidates (`no-cache`) and gets 304 for a chunk it has; a tab verifies each chunk against the
 *   metadata before using it (web/worker/data/dataset-client.ts).
 */
import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { datasetRouter } from './idx-routes';
import {
  type ChunkedPayload,
  type TensorsDatasetMetadata,
  type TensorsPayload,
  type TextDatasetMetadata,
  type TextPayload,
  windowCount,
} from '../../core/data/chunked-dataset';
import type { TensorsDataset, TextDataset } from './user-datasets';

/** 1 MiB: a text corpus of a few MB is a handful of requests; a window never spans more than two chunks. */
export const DEFAULT_CHUNK_BYTES = 1 << 20;

function chunked(key: string, bytes: Uint8Array, chunkBytes: number): ChunkedPayload {
  const chunks: string[] = [];
  for (let start = 0; start < bytes.length; start += chunkBytes) {
    chunks.push(
      createHash('sha256')
        .update(bytes.subarray(start, start + chunkBytes))
        .digest('hex'),
    );
  }
  return { url: `/api/dataset/chunks/${key}`, bytes: bytes.length, chunkBytes, chunks };
}

const asBytes = (a: Float32Array | Uint32Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

/** Metadata and payloads of a text dataset for a model of `context` tokens. */
export function textPayloads(dataset: TextDataset, context: number, chunkBytes = DEFAULT_CHUNK_BYTES) {
  const payloads: Record<TextPayload, Uint8Array> = { train: dataset.train, test: dataset.test };
  const metadata: TextDatasetMetadata = {
    kind: 'text',
    name: dataset.name,
    vocab: 256,
    context,
    train: { bytes: dataset.train.length, count: windowCount(dataset.train.length, context) },
    test: { bytes: dataset.test.length, count: windowCount(dataset.test.length, context) },
    files: { train: chunked('train', dataset.train, chunkBytes), test: chunked('test', dataset.test, chunkBytes) },
  };
  return { metadata, payloads };
}

/** Metadata and payloads of a tensors dataset. */
export function tensorsPayloads(dataset: TensorsDataset, chunkBytes = DEFAULT_CHUNK_BYTES) {
  const payloads: Record<TensorsPayload, Uint8Array> = {
    'train/x': asBytes(dataset.train.x),
    'train/y': asBytes(dataset.train.y),
    'test/x': asBytes(dataset.test.x),
    'test/y': asBytes(dataset.test.y),
  };
  const files = {} as Record<TensorsPayload, ChunkedPayload>;
  for (const [key, bytes] of Object.entries(payloads)) files[key as TensorsPayload] = chunked(key, bytes, chunkBytes);
  const metadata: TensorsDatasetMetadata = {
    kind: 'tensors',
    name: dataset.name,
    classes: dataset.classes,
    shape: dataset.shape,
    train: { count: dataset.train.count },
    test: { count: dataset.test.count },
    files,
  };
  return { metadata, payloads };
}

/**
 * Routes for `/api/dataset` (the metadata) and its chunks (datasetRouter, idx-routes.ts); false for other
 * URLs. A chunk index that is not a plain decimal in range is 404.
 */
export function chunkedDatasetRoutes(
  metadata: TextDatasetMetadata | TensorsDatasetMetadata,
  payloads: Record<string, Uint8Array>,
): (req: IncomingMessage, res: ServerResponse) => boolean {
  const files = metadata.files as Record<string, ChunkedPayload>;
  return datasetRouter(JSON.stringify(metadata), (path) => {
    const match = /^\/api\/dataset\/chunks\/(.+)\/(0|[1-9]\d{0,8})$/.exec(path);
    const file = match && Object.hasOwn(files, match[1]) ? files[match[1]] : undefined;
    const index = match ? Number(match[2]) : -1;
    if (!match || !file || index >= file.chunks.length) return { notFound: `no dataset chunk ${path}` };
    const body = payloads[match[1]].subarray(index * file.chunkBytes, (index + 1) * file.chunkBytes);
    return { sha256: file.chunks[index], body };
  });
}
