/**
 * An image-classification dataset in IDX files (the MNIST / Fashion-MNIST format), read from a folder
 * and checked: the parser and loader the coordinator and the verifier process share.
 *
 * Files: `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`,
 * `t10k-labels-idx1-ubyte`, each raw or gzipped (`.gz`; detected by the gzip magic, not the name).
 * Every way a file can be wrong (missing, bad magic, not unsigned bytes, truncated, trailing bytes,
 * counts that disagree, labels out of range) is one error that names the file, because the person
 * who reads it is pointing a job at a folder and needs to know which file to fix.
 *
 * The payloads the coordinator serves (coordinator/datasets/idx-routes.ts) are the IDX data sections
 * without headers (images: count·rows·cols bytes, row-major; labels: count bytes); `datasetMetadata`
 * describes their shapes, so the browser needs no IDX parser. Each payload's SHA-256 is its ETag, which
 * the browser's cache is keyed by.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';
import { createGunzip } from 'node:zlib';
import type { DatasetFileKey, DatasetMetadata } from '../core/data/idx-metadata';

/** IDX magic of a rank-3 unsigned-byte array (images). */
export const IDX_IMAGES_MAGIC = 2051;
/** IDX magic of a rank-1 unsigned-byte array (labels). */
export const IDX_LABELS_MAGIC = 2049;
/** IDX type code of unsigned bytes, the only element type we accept. */
const IDX_TYPE_UBYTE = 0x08;

/** A parsed IDX file: its magic number, dimensions and data section (a view, not a copy). */
export interface IdxArray {
  magic: number;
  dims: number[];
  data: Uint8Array;
}

export interface IdxSplit {
  /** count·rows·cols pixels, row-major, one byte each. */
  images: Uint8Array;
  /** count labels in [0, classes). */
  labels: Uint8Array;
  count: number;
  rows: number;
  cols: number;
}

export const DATASET_FILE_KEYS: readonly DatasetFileKey[] = [
  'train/images',
  'train/labels',
  'test/images',
  'test/labels',
];

export interface IdxDataset {
  /** The folder's name, e.g. `fashion-mnist`. */
  name: string;
  /** Number of classes: labels are in [0, classes). */
  classes: number;
  train: IdxSplit;
  test: IdxSplit;
  /** Hex SHA-256 of each served payload (the data section, without the IDX header). */
  sha256: Record<DatasetFileKey, string>;
}

export interface LoadIdxOptions {
  /** Called as each file is read: `bytes` of `total` (on-disk sizes, so compressed for `.gz`). */
  onProgress?(p: { file: string; bytes: number; total: number }): void;
  /** Labels must lie in [0, classes). Default 10. */
  classes?: number;
}

/** The base names of the four IDX files, by split and kind. */
const FILE_NAMES: Record<DatasetFileKey, string> = {
  'train/images': 'train-images-idx3-ubyte',
  'train/labels': 'train-labels-idx1-ubyte',
  'test/images': 't10k-images-idx3-ubyte',
  'test/labels': 't10k-labels-idx1-ubyte',
};

/**
 * Parse an IDX file's bytes (already decompressed). Checks the header (two zero bytes, unsigned-byte
 * type, rank), that the data section holds exactly the product of the dimensions, and nothing more.
 * `file` only names the file in errors.
 */
export function parseIdx(bytes: Uint8Array, file: string): IdxArray {
  if (bytes.length < 4)
    throw new Error(`${file}: not an IDX file (only ${bytes.length} bytes, the header needs at least 4)`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const magic = view.getUint32(0, false);
  if (bytes[0] !== 0 || bytes[1] !== 0) {
    throw new Error(
      `${file}: not an IDX file (magic number ${magic} = 0x${magic.toString(16).padStart(8, '0')}; expected 2051 for images or 2049 for labels)`,
    );
  }
  if (bytes[2] !== IDX_TYPE_UBYTE) {
    throw new Error(
      `${file}: IDX element type 0x${bytes[2].toString(16).padStart(2, '0')} is not supported (only unsigned bytes, 0x08)`,
    );
  }
  const rank = bytes[3];
  if (rank < 1) throw new Error(`${file}: IDX rank 0 (magic ${magic}) has no dimensions`);
  const headerBytes = 4 + 4 * rank;
  if (bytes.length < headerBytes) {
    throw new Error(
      `${file}: truncated IDX header (${bytes.length} bytes, a rank-${rank} header needs ${headerBytes})`,
    );
  }
  const dims: number[] = [];
  for (let i = 0; i < rank; i++) dims.push(view.getUint32(4 + 4 * i, false));
  const dataBytes = dims.reduce((a, b) => a * b, 1);
  const have = bytes.length - headerBytes;
  if (have < dataBytes) {
    throw new Error(
      `${file}: truncated: dimensions [${dims.join(', ')}] need ${dataBytes} data bytes, the file has ${have}`,
    );
  }
  if (have > dataBytes) {
    throw new Error(`${file}: ${have - dataBytes} unexpected bytes after the data of dimensions [${dims.join(', ')}]`);
  }
  return { magic, dims, data: bytes.subarray(headerBytes) };
}

/** Check that a parsed file is an image array (magic 2051, [count, rows, cols]). */
function expectImages(idx: IdxArray, file: string): { count: number; rows: number; cols: number } {
  if (idx.magic !== IDX_IMAGES_MAGIC) {
    throw new Error(`${file}: magic number ${idx.magic} is not an IDX image file (expected ${IDX_IMAGES_MAGIC})`);
  }
  const [count, rows, cols] = idx.dims;
  if (count < 1 || rows < 1 || cols < 1) throw new Error(`${file}: empty image array [${idx.dims.join(', ')}]`);
  return { count, rows, cols };
}

/** Check that a parsed file is a label array (magic 2049, [count]) with labels in [0, classes). */
function expectLabels(idx: IdxArray, file: string, classes: number): number {
  if (idx.magic !== IDX_LABELS_MAGIC) {
    throw new Error(`${file}: magic number ${idx.magic} is not an IDX label file (expected ${IDX_LABELS_MAGIC})`);
  }
  const [count] = idx.dims;
  if (count < 1) throw new Error(`${file}: no labels`);
  for (let i = 0; i < idx.data.length; i++) {
    if (idx.data[i] >= classes)
      throw new Error(`${file}: label ${idx.data[i]} at index ${i} is outside [0, ${classes})`);
  }
  return count;
}

/**
 * Build a split from parsed image and label files, checking they agree. Exported for unit tests.
 */
export function idxSplit(
  images: IdxArray,
  imagesFile: string,
  labels: IdxArray,
  labelsFile: string,
  classes = 10,
): IdxSplit {
  const { count, rows, cols } = expectImages(images, imagesFile);
  const labelCount = expectLabels(labels, labelsFile, classes);
  if (labelCount !== count) {
    throw new Error(`${labelsFile}: ${labelCount} labels but ${imagesFile} has ${count} images`);
  }
  return { images: images.data, labels: labels.data, count, rows, cols };
}

/** The path of `name` or `name.gz` in `dir`, preferring the uncompressed file. */
async function findFile(dir: string, name: string): Promise<string> {
  for (const candidate of [name, `${name}.gz`]) {
    const path = join(dir, candidate);
    const info = await stat(path).catch(() => undefined);
    if (info?.isFile()) return path;
  }
  throw new Error(`dataset ${dir}: missing ${name} (or ${name}.gz)`);
}

/**
 * Read a file, gunzipping it when it starts with the gzip magic (1f 8b), reporting on-disk bytes read.
 * Streams so that progress is real and a corrupt `.gz` fails with the file's name.
 */
async function readMaybeGzip(path: string, onProgress?: LoadIdxOptions['onProgress']): Promise<Uint8Array> {
  const total = (await stat(path)).size;
  const file = basename(path);
  const chunks: Buffer[] = [];
  let bytes = 0;
  let gunzip: ReturnType<typeof createGunzip> | undefined;
  const output: Buffer[] = [];
  await new Promise<void>((resolvePromise, reject) => {
    const fail = (err: Error) => reject(new Error(`${file}: ${err.message}`));
    const input = createReadStream(path);
    input.on('error', fail);
    input.on('data', (chunk) => {
      const buf = chunk as Buffer;
      if (bytes === 0 && buf.length >= 2 && buf[0] === 0x1f && buf[1] === 0x8b) {
        gunzip = createGunzip();
        gunzip.on('data', (out: Buffer) => output.push(out));
        gunzip.on('error', (err) => fail(new Error(`corrupt gzip data (${err.message})`)));
        gunzip.on('end', () => resolvePromise());
      }
      bytes += buf.length;
      onProgress?.({ file, bytes, total });
      if (gunzip) gunzip.write(buf);
      else chunks.push(buf);
    });
    input.on('end', () => {
      if (gunzip) gunzip.end();
      else resolvePromise();
    });
  });
  const parts = gunzip ? output : chunks;
  const joined = Buffer.concat(parts);
  return new Uint8Array(joined.buffer, joined.byteOffset, joined.byteLength);
}

function sha256Hex(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** Load and validate the four IDX files of `dir`. */
export async function loadIdxDataset(dir: string, opts: LoadIdxOptions = {}): Promise<IdxDataset> {
  const root = resolve(dir);
  const info = await stat(root).catch(() => undefined);
  if (!info)
    throw new Error(
      `dataset folder ${root} does not exist (Fashion-MNIST: apt-get install dataset-fashion-mnist, then use /usr/share/datasets/fashion-mnist)`,
    );
  if (!info.isDirectory()) throw new Error(`dataset path ${root} is not a folder`);
  const classes = opts.classes ?? 10;
  const paths = {} as Record<DatasetFileKey, string>;
  for (const key of DATASET_FILE_KEYS) paths[key] = await findFile(root, FILE_NAMES[key]);
  const parsed = {} as Record<DatasetFileKey, IdxArray>;
  for (const key of DATASET_FILE_KEYS) {
    parsed[key] = parseIdx(await readMaybeGzip(paths[key], opts.onProgress), basename(paths[key]));
  }
  const split = (s: 'train' | 'test') =>
    idxSplit(
      parsed[`${s}/images`],
      basename(paths[`${s}/images`]),
      parsed[`${s}/labels`],
      basename(paths[`${s}/labels`]),
      classes,
    );
  const train = split('train');
  const test = split('test');
  if (train.rows !== test.rows || train.cols !== test.cols) {
    throw new Error(
      `${basename(paths['test/images'])}: images are ${test.rows}×${test.cols} but training images are ${train.rows}×${train.cols}`,
    );
  }
  const sha256 = {} as Record<DatasetFileKey, string>;
  for (const key of DATASET_FILE_KEYS) sha256[key] = sha256Hex(parsed[key].data);
  return { name: basename(root), classes, train, test, sha256 };
}

export function datasetMetadata(dataset: IdxDataset): DatasetMetadata {
  const files = {} as DatasetMetadata['files'];
  for (const key of DATASET_FILE_KEYS) {
    files[key] = {
      url: `/api/dataset/${key}`,
      bytes: payload(dataset, key).byteLength,
      sha256: dataset.sha256[key],
      etag: etagOf(dataset, key),
    };
  }
  return {
    name: dataset.name,
    classes: dataset.classes,
    shape: [dataset.train.rows, dataset.train.cols, 1],
    train: { count: dataset.train.count },
    test: { count: dataset.test.count },
    files,
  };
}

/** The bytes served for `key`: the data section of that IDX file, without its header. */
export function payload(dataset: IdxDataset, key: DatasetFileKey): Uint8Array {
  const [split, kind] = key.split('/') as ['train' | 'test', 'images' | 'labels'];
  return dataset[split][kind];
}

function etagOf(dataset: IdxDataset, key: DatasetFileKey): string {
  return sha256Etag(dataset.sha256[key]);
}

/** The strong ETag of a payload whose SHA-256 is `hex`. */
export const sha256Etag = (hex: string) => `"sha256-${hex}"`;
