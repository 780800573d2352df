/**
 * The training worker's data layer for a user's dataset (web/worker/data/chunked-data.ts) against the
 * coordinator's real chunk routes: a step's samples come out as the model takes them (text: u32 input
 * tokens and next-byte targets; tensors: float32 rows and u32 labels), only the chunks they touch are
 * downloaded, a gather of samples not prepared fails loudly, and the test sets are what the docs say.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chunkedDatasetRoutes, tensorsPayloads, textPayloads } from '../../../../coordinator/datasets/dataset-chunks';
import { loadTensorsDataset, loadTextDataset } from '../../../../coordinator/datasets/user-datasets';
import type { ChunkedPayload } from '../../../../core/data/chunked-dataset';
import { ChunkFetcher, chunkedMetadata } from '../../../../web/worker/data/dataset-client';
import { imageData } from '../../../../web/worker/data/batches';
import { chunkedData } from '../../../../web/worker/data/chunked-data';
import { mulberry32 } from '../../../support/rng';
import { safetensorsFile } from '../../../support/safetensors-file';

const CONTEXT = 8;
let dir: string;
const servers: Server[] = [];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tabswarm-chunked-data-'));
});
afterAll(async () => {
  for (const s of servers) await new Promise<void>((r) => s.close(() => r()));
  await rm(dir, { recursive: true, force: true });
});

async function serve({
  metadata,
  payloads,
}: {
  metadata: Parameters<typeof chunkedDatasetRoutes>[0];
  payloads: Record<string, Uint8Array>;
}) {
  const route = chunkedDatasetRoutes(metadata, payloads);
  const server = createServer((req, res) => {
    if (!route(req, res)) res.writeHead(404).end();
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const meta = chunkedMetadata(await (await fetch(`${base}/api/dataset`)).json())!;
  return { base, meta };
}

describe('text batches', () => {
  const rand = mulberry32(3);
  const corpus = Uint8Array.from({ length: 3000 }, () => 97 + Math.floor(rand() * 26));
  let base: string;
  let meta: NonNullable<ReturnType<typeof chunkedMetadata>>;

  beforeAll(async () => {
    await writeFile(join(dir, 'corpus.txt'), corpus);
    const d = await loadTextDataset({ path: join(dir, 'corpus.txt') }, CONTEXT);
    ({ base, meta } = await serve(textPayloads(d, CONTEXT, 100)));
  });

  it('a window start gives context input tokens and the next byte of each as targets, from the chunks it touches', async () => {
    const fetcher = new ChunkFetcher(base, 4);
    const data = chunkedData(meta, fetcher);
    const train = corpus.subarray(0, Math.floor(corpus.length * 0.95));
    expect(data).toMatchObject({ kind: 'text', trainCount: train.length - CONTEXT });
    const batches = data.batches(4);
    const starts = Uint32Array.from([0, 95, 1000, train.length - CONTEXT - 1]);
    await batches.prepare(starts);
    // Chunks of 100 bytes: 0; 0 and 1 (bytes 95..103); 10; 28 (bytes 2841..2849, the last window).
    expect(fetcher.requests).toBe(4);
    const { x, labels, batch } = batches.gather(starts);
    expect(batch).toBe(4);
    expect(x).toBeInstanceOf(Uint32Array);
    starts.forEach((s, b) => {
      expect(Array.from(x.subarray(b * CONTEXT, (b + 1) * CONTEXT))).toEqual(
        Array.from(train.subarray(s, s + CONTEXT)),
      );
      expect(Array.from(labels.subarray(b * CONTEXT, (b + 1) * CONTEXT))).toEqual(
        Array.from(train.subarray(s + 1, s + CONTEXT + 1)),
      );
    });
    // Prepared again: nothing to wait for. Not prepared: an error, not stale bytes.
    expect(batches.prepare(starts)).toBeNull();
    expect(() => batches.gather([2000])).toThrow(/chunk 20 is not loaded/);
    expect(() => batches.prepare([train.length - CONTEXT])).toThrow(/outside \[0, /);
  });

  it('keeps at most maxChunks in memory but never drops those of the step being prepared', async () => {
    const fetcher = new ChunkFetcher(base, 2);
    const batches = chunkedData(meta, fetcher).batches(8);
    const starts = Uint32Array.from([0, 300, 600, 900, 1200]); // five chunks
    await batches.prepare(starts);
    const { x } = batches.gather(starts);
    expect(Array.from(x.subarray(4 * CONTEXT, 5 * CONTEXT))).toEqual(Array.from(corpus.subarray(1200, 1208)));
    await batches.prepare([1500]);
    expect(() => batches.gather([0])).toThrow(/not loaded/);
  });

  it('the test set is the held-out text in non-overlapping windows', async () => {
    const data = chunkedData(meta, new ChunkFetcher(base));
    const test = corpus.subarray(Math.floor(corpus.length * 0.95));
    expect(data.testCount).toBe(Math.floor((test.length - 1) / CONTEXT));
    const set = await data.testSet(5);
    expect(set).toMatchObject({ count: 5, positions: CONTEXT, bytes: true });
    expect(Array.from(set.x)).toEqual(Array.from(test.subarray(0, 5 * CONTEXT)));
    expect(Array.from(set.labels)).toEqual(Array.from(test.subarray(1, 5 * CONTEXT + 1)));
  });
});

describe('tensors batches', () => {
  it('rows of x as float32 and y as u32 labels, the same as the IDX images for the same bytes', async () => {
    const rand = mulberry32(5);
    const count = 60;
    const pixels = Uint8Array.from({ length: count * 4 * 3 }, () => Math.floor(rand() * 256));
    const y = Uint8Array.from({ length: count }, () => Math.floor(rand() * 10));
    const file = safetensorsFile({
      x: { dtype: 'U8', shape: [count, 4, 3], data: pixels },
      y: { dtype: 'U8', shape: [count], data: y },
    });
    await writeFile(join(dir, 'rows.safetensors'), file);
    const d = await loadTensorsDataset({ path: join(dir, 'rows.safetensors') });
    const { base, meta } = await serve(tensorsPayloads(d, 100));
    const fetcher = new ChunkFetcher(base);
    const data = chunkedData(meta, fetcher);
    expect(data).toMatchObject({ kind: 'tensors', trainCount: 57, testCount: 3 });
    const images = imageData({
      name: 'same',
      classes: 10,
      train: { images: pixels, labels: y, count: 57, rows: 4, cols: 3 },
      test: { images: pixels.subarray(57 * 12), labels: y.subarray(57), count: 3, rows: 4, cols: 3 },
    });
    const order = Uint32Array.from([56, 3, 17, 0, 31]);
    const batches = data.batches(8);
    await batches.prepare(order);
    const ours = batches.gather(order);
    const ref = images.batches(8).gather(order);
    expect(ours.x).toBeInstanceOf(Float32Array);
    expect(
      Buffer.from(ours.x.buffer, 0, ours.x.byteLength).equals(Buffer.from(ref.x.buffer, 0, ref.x.byteLength)),
    ).toBe(true);
    expect(Array.from(ours.labels)).toEqual(Array.from(ref.labels));
    // A step needing more chunks than the fetcher keeps (x and y together) still has all of them at hand.
    const tight = chunkedData(meta, new ChunkFetcher(base, 2)).batches(8);
    await tight.prepare(order);
    expect(Array.from(tight.gather(order).labels)).toEqual(Array.from(ref.labels));
    const [t, r] = await Promise.all([data.testSet(10), images.testSet(10)]);
    expect(t.count).toBe(3);
    expect(Array.from(t.x)).toEqual(Array.from(r.x));
    expect(Array.from(t.labels)).toEqual(Array.from(r.labels));
  });
});

describe('chunk cache', () => {
  /** Cache Storage's calls as ChunkFetcher makes them, over a Map (Node has no `caches`). */
  class MapCache {
    readonly entries = new Map<string, Uint8Array>();
    async match(key: string) {
      const bytes = this.entries.get(key);
      return bytes && new Response(bytes.slice());
    }
    async put(key: string, res: Response) {
      this.entries.set(key, new Uint8Array(await res.arrayBuffer()));
    }
    async delete(key: string, opts?: { ignoreSearch?: boolean }) {
      for (const k of [...this.entries.keys()])
        if (k === key || (opts?.ignoreSearch && k.split('?')[0] === key)) this.entries.delete(k);
      return true;
    }
  }

  it('a second fetcher (a reload) takes every chunk from the cache; a corrupt entry is fetched again', async () => {
    const corpus = new TextEncoder().encode('abcdefghij'.repeat(100));
    await writeFile(join(dir, 'cached.txt'), corpus);
    const d = await loadTextDataset({ path: join(dir, 'cached.txt') }, CONTEXT);
    const { base, meta } = await serve(textPayloads(d, CONTEXT, 128));
    const cache = new MapCache();
    const progress: { loadedBytes: number; cachedBytes: number }[] = [];
    const fetcherOf = () =>
      new ChunkFetcher(base, 64, undefined, {
        cache: Promise.resolve(cache as unknown as Cache),
        onProgress: (p) => progress.push(p),
      });
    const train = (meta.files as Record<string, ChunkedPayload>).train;
    const first = fetcherOf();
    const a = await first.range(train, 0, train.bytes);
    expect(first.requests).toBe(Math.ceil(train.bytes / 128));
    expect(first.cachedBytes).toBe(0);
    expect(cache.entries.size).toBe(first.requests);
    const second = fetcherOf();
    const b = await second.range(train, 0, train.bytes);
    expect(Array.from(b)).toEqual(Array.from(a));
    expect(second.requests).toBe(0);
    expect(second.cachedBytes).toBe(train.bytes);
    expect(progress.at(-1)).toMatchObject({ loadedBytes: train.bytes, cachedBytes: train.bytes });
    // A corrupted entry is not trained on: dropped and downloaded again.
    const [key] = [...cache.entries.keys()];
    cache.entries.set(key, new Uint8Array(128).fill(1));
    const third = fetcherOf();
    expect(Array.from(await third.range(train, 0, 128))).toEqual(Array.from(a.subarray(0, 128)));
    expect(third.requests).toBe(1);
  });
});
