/**
 * Fetch the job's dataset from the coordinator (`GET /api/dataset` + four byte payloads), with
 * progress, and keep it in the browser's Cache Storage keyed by URL + SHA-256, so a reload or a
 * second visit does not download 50 MB again (and a changed dataset is fetched anew).
 *
 * The bytes are verified against the SHA-256 the coordinator published, whether they came from the
 * network or the cache: a corrupt cache entry is dropped and fetched again rather than trained on.
 */
import {
  type ChunkedDatasetMetadata,
  type ChunkedPayload,
  chunkCount,
  chunkLength,
  windowCount,
} from '../../../core/data/chunked-dataset';
import type { DatasetFileKey, DatasetMetadata } from '../../../core/data/idx-metadata';
import type { DatasetBytes, DatasetSplitBytes } from '../types';

const FILE_KEYS: readonly DatasetFileKey[] = ['train/images', 'train/labels', 'test/images', 'test/labels'];

export interface DatasetProgress {
  /** Bytes obtained so far (from the network or the cache). */
  loadedBytes: number;
  totalBytes: number;
  /** Of `loadedBytes`, how many came from the browser cache. */
  cachedBytes: number;
  /** The file being loaded, e.g. `train/images`; undefined once all are loaded. */
  file?: DatasetFileKey;
}

export const DATASET_CACHE_NAME = 'tabswarm-dataset-v1';

function checkMetadata(m: unknown): DatasetMetadata {
  const meta = m as DatasetMetadata;
  const ok =
    meta &&
    typeof meta.name === 'string' &&
    Number.isInteger(meta.classes) &&
    Array.isArray(meta.shape) &&
    Number.isInteger(meta.train?.count) &&
    Number.isInteger(meta.test?.count) &&
    FILE_KEYS.every((k) => typeof meta.files?.[k]?.url === 'string' && Number.isInteger(meta.files[k].bytes));
  if (!ok) throw new Error('the coordinator sent malformed dataset metadata');
  return meta;
}

async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', bytes as Uint8Array<ArrayBuffer>);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, '0')).join('');
}

/** The part of Cache Storage's `Cache` the dataset download uses (a Node process brings its own). */
export type DatasetCache = Pick<Cache, 'match' | 'put' | 'delete'>;

/** Cache Storage exists only in secure contexts (and not in some private modes); work without it. */
export async function openCache(): Promise<Cache | undefined> {
  try {
    return typeof caches === 'undefined' ? undefined : await caches.open(DATASET_CACHE_NAME);
  } catch {
    return undefined;
  }
}

/**
 * The verified bytes cached under `key` (exactly `bytes` bytes with SHA-256 `sha256`), or undefined;
 * a corrupt entry is dropped, so it is fetched again rather than trained on.
 */
async function verifiedFromCache(
  cache: DatasetCache | undefined,
  key: string,
  bytes: number,
  sha256: string,
): Promise<Uint8Array | undefined> {
  const hit = await cache?.match(key);
  if (!hit) return undefined;
  const data = new Uint8Array(await hit.arrayBuffer());
  if (data.byteLength === bytes && (await sha256Hex(data)) === sha256) return data;
  await cache?.delete(key);
  return undefined;
}

/**
 * Keep `data` under `key`, dropping the entries of `url` with another hash (an older dataset's). A full
 * or disabled cache only costs a download next time, so failures here are not errors.
 */
async function storeInCache(
  cache: DatasetCache | undefined,
  url: string,
  key: string,
  data: Uint8Array,
  headers?: HeadersInit,
): Promise<void> {
  await cache
    ?.delete(url, { ignoreSearch: true })
    .then(() => cache.put(key, new Response(data as Uint8Array<ArrayBuffer>, { headers })))
    .catch(() => undefined);
}

/** Read a response body into one preallocated array, reporting bytes as they arrive. */
async function readBody(res: Response, expectedBytes: number, onBytes: (n: number) => void): Promise<Uint8Array> {
  if (!res.body) {
    const whole = new Uint8Array(await res.arrayBuffer());
    onBytes(whole.byteLength);
    return whole;
  }
  let out = new Uint8Array(expectedBytes);
  let length = 0;
  const reader = res.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (length + value.byteLength > out.byteLength) {
      const grown = new Uint8Array(Math.max(out.byteLength * 2, length + value.byteLength));
      grown.set(out.subarray(0, length));
      out = grown;
    }
    out.set(value, length);
    length += value.byteLength;
    onBytes(value.byteLength);
  }
  return length === out.byteLength ? out : out.slice(0, length);
}

/** `GET /api/dataset`: an IDX set's metadata, or a chunked dataset's (it has a `kind`). */
export async function fetchDatasetMetadata(baseUrl = ''): Promise<unknown> {
  const res = await fetch(`${baseUrl}/api/dataset`, { cache: 'no-cache' });
  if (!res.ok) throw new Error(`dataset metadata: HTTP ${res.status} ${await res.text().catch(() => '')}`.trim());
  return res.json();
}

/**
 * Load the dataset served at `baseUrl` (the coordinator's origin; '' for this page's origin).
 * `onProgress` is called as bytes arrive; `metadata` is `GET /api/dataset`'s answer when already fetched.
 * `cache` is where verified files are kept between runs: default the browser's Cache Storage; a Node
 * process passes its own (headless/dataset-cache.ts), or null for none.
 */
export async function fetchDataset(
  baseUrl = '',
  onProgress?: (p: DatasetProgress) => void,
  metadata?: unknown,
  cache?: DatasetCache | null,
): Promise<DatasetBytes> {
  const meta = checkMetadata(metadata ?? (await fetchDatasetMetadata(baseUrl)));
  const store = cache === undefined ? await openCache() : (cache ?? undefined);
  const progress: DatasetProgress = {
    loadedBytes: 0,
    totalBytes: FILE_KEYS.reduce((s, k) => s + meta.files[k].bytes, 0),
    cachedBytes: 0,
  };
  const bytes = {} as Record<DatasetFileKey, Uint8Array>;
  for (const key of FILE_KEYS) {
    const file = meta.files[key];
    progress.file = key;
    onProgress?.({ ...progress });
    // An absolute `baseUrl` needs no page to resolve against (a Node process has no `location`).
    const absolute = new URL(`${baseUrl}${file.url}`, globalThis.location?.href);
    const cacheKey = new URL(absolute);
    cacheKey.searchParams.set('sha256', file.sha256);
    let data = await verifiedFromCache(store, cacheKey.href, file.bytes, file.sha256);
    if (data) {
      progress.loadedBytes += data.byteLength;
      progress.cachedBytes += data.byteLength;
      onProgress?.({ ...progress });
    } else {
      const res = await fetch(absolute.href, { cache: 'no-store' });
      if (!res.ok) throw new Error(`dataset ${key}: HTTP ${res.status}`);
      data = await readBody(res, file.bytes, (n) => {
        progress.loadedBytes += n;
        onProgress?.({ ...progress });
      });
      if (data.byteLength !== file.bytes)
        throw new Error(`dataset ${key}: received ${data.byteLength} bytes, expected ${file.bytes}`);
      if ((await sha256Hex(data)) !== file.sha256)
        throw new Error(`dataset ${key}: SHA-256 does not match the coordinator's`);
      await storeInCache(store, absolute.href, cacheKey.href, data, {
        'Content-Type': 'application/octet-stream',
        ETag: file.etag,
      });
    }
    bytes[key] = data;
  }
  progress.file = undefined;
  onProgress?.({ ...progress });
  const [rows, cols] = meta.shape;
  const split = (s: 'train' | 'test'): DatasetSplitBytes => ({
    images: bytes[`${s}/images`],
    labels: bytes[`${s}/labels`],
    count: meta[s].count,
    rows,
    cols,
  });
  return { name: meta.name, classes: meta.classes, train: split('train'), test: split('test') };
}

/** The ArrayBuffers of a dataset, for `Comlink.transfer` to the worker (zero copy). */
export function datasetBuffers(d: DatasetBytes): ArrayBuffer[] {
  return [d.train.images, d.train.labels, d.test.images, d.test.labels].map((a) => a.buffer as ArrayBuffer);
}

/** What a `ChunkFetcher` has obtained so far (the volunteer page shows it). */
export interface ChunkProgress {
  /** Chunks obtained (downloaded or from the cache) and their bytes. */
  chunks: number;
  loadedBytes: number;
  /** Of `loadedBytes`, how many came from the browser cache. */
  cachedBytes: number;
}

export interface ChunkFetcherOptions {
  /** Cache Storage to keep verified chunks in (keyed by URL + SHA-256), so a reload downloads nothing again. */
  cache?: Promise<Cache | undefined>;
  onProgress?(p: ChunkProgress): void;
}

const isPayload = (p: ChunkedPayload | undefined, bytes?: number): boolean =>
  !!p &&
  typeof p.url === 'string' &&
  p.url.startsWith('/api/dataset/chunks/') &&
  Number.isInteger(p.bytes) &&
  (bytes === undefined || p.bytes === bytes) &&
  Number.isInteger(p.chunkBytes) &&
  p.chunkBytes > 0 &&
  Array.isArray(p.chunks) &&
  p.chunks.length === chunkCount(p.bytes, p.chunkBytes) &&
  p.chunks.every((h) => typeof h === 'string' && /^[0-9a-f]{64}$/.test(h));

/** `GET /api/dataset`'s answer as a chunked dataset's metadata, checked for consistency; undefined for an IDX set. */
export function chunkedMetadata(m: unknown): ChunkedDatasetMetadata | undefined {
  const meta = m as ChunkedDatasetMetadata;
  if (!meta || typeof meta !== 'object' || !('kind' in meta)) return undefined;
  const count = (n: unknown) => Number.isInteger(n) && (n as number) >= 1;
  let ok = false;
  if (meta.kind === 'text') {
    const c = meta.context;
    ok =
      Number.isInteger(c) &&
      c >= 1 &&
      (['train', 'test'] as const).every(
        (s) =>
          isPayload(meta.files?.[s], meta[s]?.bytes) &&
          meta[s].count === windowCount(meta[s].bytes, c) &&
          count(meta[s].count),
      );
  } else if (meta.kind === 'tensors') {
    const features = Array.isArray(meta.shape) ? meta.shape.reduce((a, b) => a * b, 1) : Number.NaN;
    ok =
      Number.isInteger(features) &&
      features >= 1 &&
      Number.isInteger(meta.classes) &&
      (['train', 'test'] as const).every(
        (s) =>
          count(meta[s]?.count) &&
          isPayload(meta.files?.[`${s}/x`], meta[s].count * features * 4) &&
          isPayload(meta.files?.[`${s}/y`], meta[s].count * 4),
      );
  }
  if (!ok) throw new Error('the coordinator sent malformed dataset metadata');
  return meta;
}

/**
 * Fetches byte ranges of chunked payloads (a user's text or tensors dataset), downloading only the
 * chunks a range touches, each verified against the SHA-256 the coordinator published before use,
 * whether it came from the network or the cache (`opts.cache`, like the IDX set's: a corrupt entry is
 * dropped and fetched again). Chunks are kept in memory (at most `maxChunks`, oldest dropped first,
 * never one of the last `ensure`); HTTP revalidation by ETag lets the browser cache answer repeats with 304.
 */
export class ChunkFetcher {
  /** Chunks downloaded and bytes received (progress; tests count them). */
  requests = 0;
  fetchedBytes = 0;
  /** Chunks and bytes taken from Cache Storage instead of the network. */
  cachedChunks = 0;
  cachedBytes = 0;
  private readonly held = new Map<string, Promise<Uint8Array>>();
  /** The held chunks that have arrived, for synchronous reads (`copy`). */
  private readonly ready = new Map<string, Uint8Array>();
  /** Chunks the last `ensure` asked for: never evicted before the next one. */
  private pinned = new Set<string>();

  constructor(
    private readonly baseUrl = '',
    private readonly maxChunks = 64,
    private readonly fetchImpl: typeof fetch = (input, init) => fetch(input, init),
    private readonly opts: ChunkFetcherOptions = {},
  ) {}

  /** Chunk `i` of `file`, verified. */
  chunk(file: ChunkedPayload, i: number): Promise<Uint8Array> {
    if (!Number.isInteger(i) || i < 0 || i >= file.chunks.length)
      throw new Error(`dataset ${file.url}: no chunk ${i} (it has ${file.chunks.length})`);
    const key = `${file.url}/${i}`;
    let held = this.held.get(key);
    if (!held) {
      const download = this.download(file, i).then((data) => {
        if (this.held.get(key) === download) this.ready.set(key, data);
        return data;
      });
      // A failed chunk is fetched again next time (unless a newer download already took its place).
      download.catch(() => this.held.get(key) === download && this.held.delete(key));
      this.held.set(key, download);
      held = download;
      this.evict();
    }
    return held;
  }

  /** Drop the oldest chunks beyond `maxChunks`, except pinned ones. */
  private evict(): void {
    for (const key of this.held.keys()) {
      if (this.held.size <= this.maxChunks) return;
      if (this.pinned.has(key)) continue;
      this.held.delete(key);
      this.ready.delete(key);
    }
  }

  /**
   * Have the chunks `chunks` of each `file` in memory for `copy` until the next `ensure` (which unpins
   * them); null when they are all there already (nothing to wait for).
   */
  ensure(wanted: readonly { file: ChunkedPayload; chunks: Iterable<number> }[]): Promise<void> | null {
    const parts = wanted.map(({ file, chunks }) => ({ file, chunks: [...new Set(chunks)] }));
    this.pinned = new Set(parts.flatMap(({ file, chunks }) => chunks.map((i) => `${file.url}/${i}`)));
    const missing = parts.flatMap(({ file, chunks }) =>
      chunks.filter((i) => !this.ready.has(`${file.url}/${i}`)).map((i) => this.chunk(file, i)),
    );
    return missing.length === 0 ? null : Promise.all(missing).then(() => undefined);
  }

  /** Copy bytes [start, end) of `file` into `out` at `at`, from chunks in memory (`ensure` them first). */
  copy(file: ChunkedPayload, start: number, end: number, out: Uint8Array, at: number): void {
    for (let pos = start; pos < end; ) {
      const i = Math.floor(pos / file.chunkBytes);
      const data = this.ready.get(`${file.url}/${i}`);
      if (!data) throw new Error(`dataset ${file.url}: chunk ${i} is not loaded`);
      const base = i * file.chunkBytes;
      const to = Math.min(end, base + data.byteLength);
      out.set(data.subarray(pos - base, to - base), at + pos - start);
      pos = to;
    }
  }

  private report(): void {
    this.opts.onProgress?.({
      chunks: this.requests + this.cachedChunks,
      loadedBytes: this.fetchedBytes + this.cachedBytes,
      cachedBytes: this.cachedBytes,
    });
  }

  private async download(file: ChunkedPayload, i: number): Promise<Uint8Array> {
    const url = this.baseUrl ? `${this.baseUrl}${file.url}/${i}` : new URL(`${file.url}/${i}`, location.href).href;
    const expected = chunkLength(file.bytes, file.chunkBytes, i);
    const cache = await this.opts.cache;
    const cacheKey = `${url}?sha256=${file.chunks[i]}`;
    const hit = await verifiedFromCache(cache, cacheKey, expected, file.chunks[i]);
    if (hit) {
      this.cachedChunks++;
      this.cachedBytes += hit.byteLength;
      this.report();
      return hit;
    }
    const res = await this.fetchImpl(url, { cache: 'no-cache' });
    if (!res.ok) throw new Error(`dataset ${file.url} chunk ${i}: HTTP ${res.status}`);
    const data = new Uint8Array(await res.arrayBuffer());
    this.requests++;
    this.fetchedBytes += data.byteLength;
    if (data.byteLength !== expected)
      throw new Error(`dataset ${file.url} chunk ${i}: ${data.byteLength} bytes, expected ${expected}`);
    if ((await sha256Hex(data)) !== file.chunks[i])
      throw new Error(`dataset ${file.url} chunk ${i}: SHA-256 does not match the coordinator's`);
    this.report();
    await storeInCache(cache, url, cacheKey, data);
    return data;
  }

  /** Bytes [start, end) of `file`. */
  async range(file: ChunkedPayload, start: number, end: number): Promise<Uint8Array> {
    if (!(Number.isInteger(start) && Number.isInteger(end) && 0 <= start && start <= end && end <= file.bytes))
      throw new Error(`dataset ${file.url}: range [${start}, ${end}) outside its ${file.bytes} bytes`);
    const out = new Uint8Array(end - start);
    if (end === start) return out;
    const first = Math.floor(start / file.chunkBytes);
    const last = Math.floor((end - 1) / file.chunkBytes);
    const chunks = await Promise.all(Array.from({ length: last - first + 1 }, (_, k) => this.chunk(file, first + k)));
    chunks.forEach((c, k) => {
      const base = (first + k) * file.chunkBytes;
      const from = Math.max(start, base);
      const to = Math.min(end, base + c.byteLength);
      out.set(c.subarray(from - base, to - base), from - start);
    });
    return out;
  }
}
