import { createServer, type Server } from 'node:http';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveDatasetDir } from '../../../coordinator/config/startup-config';
import { datasetRoutes } from '../../../coordinator/datasets/idx-routes';
import { loadIdxDataset, parseIdx, type IdxDataset } from '../../../node/idx';
import { skipWithout } from '../../support/skip';

/** An IDX file written by hand: magic, big-endian dims, data — independent of the parser. */
function idxBytes(
  magic: number,
  dims: number[],
  data: ArrayLike<number>,
  extra: { type?: number; rank?: number } = {},
): Uint8Array {
  const header = new Uint8Array(4 + 4 * dims.length);
  const view = new DataView(header.buffer);
  view.setUint32(0, magic, false);
  if (extra.type !== undefined) header[2] = extra.type;
  if (extra.rank !== undefined) header[3] = extra.rank;
  dims.forEach((d, i) => {
    view.setUint32(4 + 4 * i, d, false);
  });
  const out = new Uint8Array(header.length + data.length);
  out.set(header);
  out.set(Array.from(data), header.length);
  return out;
}

const ROWS = 3;
const COLS = 2;
function images(count: number, seed: number): Uint8Array {
  return Uint8Array.from({ length: count * ROWS * COLS }, (_, i) => (i * 37 + seed) % 256);
}
function labels(count: number): Uint8Array {
  return Uint8Array.from({ length: count }, (_, i) => (i * 3) % 10);
}

interface Files {
  'train-images-idx3-ubyte': Uint8Array;
  'train-labels-idx1-ubyte': Uint8Array;
  't10k-images-idx3-ubyte': Uint8Array;
  't10k-labels-idx1-ubyte': Uint8Array;
}
function goodFiles(): Files {
  return {
    'train-images-idx3-ubyte': idxBytes(2051, [5, ROWS, COLS], images(5, 1)),
    'train-labels-idx1-ubyte': idxBytes(2049, [5], labels(5)),
    't10k-images-idx3-ubyte': idxBytes(2051, [3, ROWS, COLS], images(3, 2)),
    't10k-labels-idx1-ubyte': idxBytes(2049, [3], labels(3)),
  };
}

const dirs: string[] = [];
async function writeDataset(
  files: Partial<Files>,
  gzip: boolean | ((name: string) => boolean) = false,
): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'tabswarm-idx-'));
  dirs.push(dir);
  for (const [name, bytes] of Object.entries(files)) {
    const gz = typeof gzip === 'function' ? gzip(name) : gzip;
    await writeFile(join(dir, gz ? `${name}.gz` : name), gz ? gzipSync(bytes) : bytes);
  }
  return dir;
}
afterAll(async () => {
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

describe('parseIdx', () => {
  it('reads the magic number, big-endian dimensions and the data section', () => {
    const data = images(4, 9);
    const idx = parseIdx(idxBytes(2051, [4, ROWS, COLS], data), 'x');
    expect(idx.magic).toBe(2051);
    expect(idx.dims).toEqual([4, ROWS, COLS]);
    expect(Array.from(idx.data)).toEqual(Array.from(data));
  });

  it('reads dimensions larger than 65535 (all four bytes are used)', () => {
    const idx = parseIdx(idxBytes(2049, [70000], new Uint8Array(70000)), 'big');
    expect(idx.dims).toEqual([70000]);
  });

  const cases: [string, Uint8Array, RegExp][] = [
    ['a file shorter than the header', new Uint8Array([0, 0]), /^f: not an IDX file \(only 2 bytes/],
    [
      'a magic number with non-zero leading bytes',
      idxBytes(0x12340803, [1], [0]),
      /^f: not an IDX file \(magic number/,
    ],
    [
      'an element type other than unsigned bytes',
      idxBytes(2049, [1], [0], { type: 0x0d }),
      /^f: IDX element type 0x0d is not supported/,
    ],
    ['rank zero', idxBytes(0x800, [], []), /^f: IDX rank 0/],
    [
      'a truncated header',
      idxBytes(2051, [5, 3, 2], []).subarray(0, 10),
      /^f: truncated IDX header \(10 bytes, a rank-3 header needs 16\)/,
    ],
    [
      'a truncated data section',
      idxBytes(2051, [5, 3, 2], new Uint8Array(29)),
      /^f: truncated: dimensions \[5, 3, 2\] need 30 data bytes, the file has 29/,
    ],
    ['bytes after the data', idxBytes(2049, [3], [1, 2, 3, 4]), /^f: 1 unexpected bytes after the data/],
  ];
  for (const [name, bytes, error] of cases) {
    it(`rejects ${name} with an error naming the file`, () => {
      expect(() => parseIdx(bytes, 'f')).toThrow(error);
    });
  }
});

describe('loadIdxDataset', () => {
  for (const [label, gzip] of [
    ['raw', false],
    ['gzipped', true],
    ['mixed raw and gzipped', (name: string) => name.includes('labels')],
  ] as const) {
    it(`loads ${label} files with matching counts, shapes and payloads`, async () => {
      const files = goodFiles();
      const progress: { file: string; bytes: number; total: number }[] = [];
      const ds = await loadIdxDataset(await writeDataset(files, gzip), { onProgress: (p) => progress.push(p) });
      expect(ds.train.count).toBe(5);
      expect(ds.test.count).toBe(3);
      expect([ds.train.rows, ds.train.cols, ds.test.rows, ds.test.cols]).toEqual([ROWS, COLS, ROWS, COLS]);
      expect(Array.from(ds.train.images)).toEqual(Array.from(images(5, 1)));
      expect(Array.from(ds.test.images)).toEqual(Array.from(images(3, 2)));
      expect(Array.from(ds.train.labels)).toEqual(Array.from(labels(5)));
      expect(Array.from(ds.test.labels)).toEqual(Array.from(labels(3)));
      // Progress ends at each file's full on-disk size.
      const finals = new Map(progress.map((p) => [p.file, p]));
      expect(finals.size).toBe(4);
      for (const p of finals.values()) expect(p.bytes).toBe(p.total);
    });
  }

  it('gives the same SHA-256 for the same payload whether raw or gzipped', async () => {
    const raw = await loadIdxDataset(await writeDataset(goodFiles(), false));
    const gz = await loadIdxDataset(await writeDataset(goodFiles(), true));
    expect(gz.sha256).toEqual(raw.sha256);
    expect(raw.sha256['train/images']).toMatch(/^[0-9a-f]{64}$/);
    expect(raw.sha256['train/images']).not.toBe(raw.sha256['test/images']);
  });

  it('rejects a folder that does not exist', async () => {
    await expect(loadIdxDataset('/nonexistent/tabswarm-dataset')).rejects.toThrow(
      /dataset folder \/nonexistent\/tabswarm-dataset does not exist/,
    );
  });

  it('rejects a folder missing a file, naming it', async () => {
    const files: Partial<Files> = goodFiles();
    delete files['t10k-labels-idx1-ubyte'];
    await expect(loadIdxDataset(await writeDataset(files))).rejects.toThrow(
      /missing t10k-labels-idx1-ubyte \(or t10k-labels-idx1-ubyte.gz\)/,
    );
  });

  const badDatasets: [string, (f: Files) => void, RegExp][] = [
    [
      'label magic on an image file',
      (f) => (f['train-images-idx3-ubyte'] = idxBytes(2049, [30], images(5, 1))),
      /^train-images-idx3-ubyte: magic number 2049 is not an IDX image file \(expected 2051\)/,
    ],
    [
      'image magic on a label file',
      (f) => (f['t10k-labels-idx1-ubyte'] = idxBytes(2051, [3, 1, 1], labels(3))),
      /^t10k-labels-idx1-ubyte: magic number 2051 is not an IDX label file \(expected 2049\)/,
    ],
    [
      'more labels than images',
      (f) => (f['train-labels-idx1-ubyte'] = idxBytes(2049, [6], labels(6))),
      /^train-labels-idx1-ubyte: 6 labels but train-images-idx3-ubyte has 5 images/,
    ],
    [
      'a label outside [0, 10)',
      (f) => (f['t10k-labels-idx1-ubyte'] = idxBytes(2049, [3], [1, 10, 2])),
      /^t10k-labels-idx1-ubyte: label 10 at index 1 is outside \[0, 10\)/,
    ],
    [
      'a truncated image file',
      (f) => (f['train-images-idx3-ubyte'] = f['train-images-idx3-ubyte'].subarray(0, 40)),
      /^train-images-idx3-ubyte: truncated: dimensions \[5, 3, 2\] need 30 data bytes, the file has 24/,
    ],
    [
      'test images of another size',
      (f) => (f['t10k-images-idx3-ubyte'] = idxBytes(2051, [3, 2, 3], images(3, 2))),
      /^t10k-images-idx3-ubyte: images are 2×3 but training images are 3×2/,
    ],
  ];
  for (const [name, corrupt, error] of badDatasets) {
    for (const gzip of [false, true]) {
      it(`rejects ${name} (${gzip ? 'gzipped' : 'raw'}) with an error naming the file`, async () => {
        const files = goodFiles();
        corrupt(files);
        const dir = await writeDataset(files, gzip);
        const expected = gzip ? new RegExp(error.source.replace(/(idx[13]-ubyte)/g, '$1.gz')) : error;
        await expect(loadIdxDataset(dir)).rejects.toThrow(expected);
      });
    }
  }

  it('rejects a truncated gzip stream, naming the file', async () => {
    const dir = await writeDataset({ ...goodFiles() }, true);
    const whole = gzipSync(goodFiles()['train-labels-idx1-ubyte']);
    await writeFile(join(dir, 'train-labels-idx1-ubyte.gz'), whole.subarray(0, whole.length - 6));
    await expect(loadIdxDataset(dir)).rejects.toThrow(/^train-labels-idx1-ubyte.gz: corrupt gzip data/);
  });
});

describe('datasetRoutes', () => {
  let server: Server;
  let base: string;
  let ds: IdxDataset;
  beforeAll(async () => {
    ds = await loadIdxDataset(await writeDataset(goodFiles(), true));
    const routes = datasetRoutes(ds);
    server = createServer((req, res) => {
      if (!routes(req, res)) res.writeHead(418).end('not mine');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const address = server.address();
    if (!address || typeof address === 'string') throw new Error('no port');
    base = `http://127.0.0.1:${address.port}`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  it('describes counts, shape and each file with its ETag', async () => {
    const res = await fetch(`${base}/api/dataset`);
    expect(res.headers.get('content-type')).toBe('application/json');
    const meta = await res.json();
    expect(meta).toMatchObject({ classes: 10, shape: [ROWS, COLS, 1], train: { count: 5 }, test: { count: 3 } });
    expect(meta.files['train/images']).toEqual({
      url: '/api/dataset/train/images',
      bytes: 5 * ROWS * COLS,
      sha256: ds.sha256['train/images'],
      etag: `"sha256-${ds.sha256['train/images']}"`,
    });
  });

  it('serves each payload as bytes with Content-Length, ETag and Cache-Control', async () => {
    const res = await fetch(`${base}/api/dataset/test/labels`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/octet-stream');
    expect(res.headers.get('content-length')).toBe('3');
    expect(res.headers.get('etag')).toBe(`"sha256-${ds.sha256['test/labels']}"`);
    expect(res.headers.get('cache-control')).toBe('no-cache');
    expect(Array.from(new Uint8Array(await res.arrayBuffer()))).toEqual(Array.from(labels(3)));
  });

  it('answers 304 to a request carrying the current ETag', async () => {
    const etag = `"sha256-${ds.sha256['train/images']}"`;
    const res = await fetch(`${base}/api/dataset/train/images`, { headers: { 'If-None-Match': etag } });
    expect(res.status).toBe(304);
  });

  it('answers 404 for an unknown file and 405 for a POST, and leaves other URLs alone', async () => {
    expect((await fetch(`${base}/api/dataset/train/pixels`)).status).toBe(404);
    expect((await fetch(`${base}/api/dataset`, { method: 'POST' })).status).toBe(405);
    expect((await fetch(`${base}/api/datasets`)).status).toBe(418);
    expect((await fetch(`${base}/index.html`)).status).toBe(418);
  });
});

const FASHION_MNIST = resolveDatasetDir(undefined, process.env);
describe('the real Fashion-MNIST', () => {
  it.skipIf(skipWithout(`Fashion-MNIST at ${FASHION_MNIST}`, existsSync(FASHION_MNIST)))(
    'has 60,000 + 10,000 28×28 images, 6,000 / 1,000 of each class',
    async () => {
      const ds = await loadIdxDataset(FASHION_MNIST);
      expect([ds.train.count, ds.test.count, ds.train.rows, ds.train.cols]).toEqual([60000, 10000, 28, 28]);
      const histogram = (l: Uint8Array) => Array.from({ length: 10 }, (_, c) => l.filter((x) => x === c).length);
      expect(histogram(ds.train.labels)).toEqual(Array(10).fill(6000));
      expect(histogram(ds.test.labels)).toEqual(Array(10).fill(1000));
    },
  );
});
