/**
 * Datasets a user brings, beside the built-in Fashion-MNIST IDX folder (node/idx.ts):
 *
 * - **text** (`{ "kind": "text", "path": FILE_OR_DIR }`): UTF-8 text as byte tokens (vocabulary 256).
 *   A folder means its regular files (not symlinks, not hidden, not those ending in one of `skip`),
 *   sorted by name and joined. The last 5% of the bytes is held out for evaluation unless `testPath`
 *   names separate text. A training sample is a window START: sample i is bytes [i, i + context + 1)
 *   (inputs and their next bytes), so a corpus of n bytes has n − context samples and the sampler
 *   covers them exactly as it covers images.
 * - **tensors** (`{ "kind": "tensors", "path": FILE_OR_DIR }`): a `.safetensors` file with `x` (F32 or
 *   U8, [count, ...features]) and `y` (integer labels [count]), or a folder holding the same two arrays
 *   as `x.npy` and `y.npy` (np.save; npy.ts); the last 5% held out unless `testPath`.
 *
 * Every way a file can be wrong is one line that names the file: missing, empty, not UTF-8 (with the
 * byte offset), too small for the context, bad safetensors header, wrong dtype or shape, out-of-range
 * offsets, label count not matching. Loading changes nothing on failure.
 */
import { createHash } from 'node:crypto';
import { lstat, readdir, readFile, stat } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';
import { windowCount } from '../../core/data/chunked-dataset';
import { type RawTensor, readSafetensors, SAFETENSORS_DTYPE_BYTES } from '../../core/data/safetensors-read';
import { parseNpy } from './npy';

/** Fraction of the bytes (text) or samples (tensors) held out when no `testPath` is given. */
export const HOLDOUT_FRACTION = 0.05;

export interface TextDataset {
  kind: 'text';
  name: string;
  /** Bytes = tokens. */
  train: Uint8Array;
  test: Uint8Array;
  /** Files read, in order. */
  files: string[];
  sha256: { train: string; test: string };
}

export interface TextSource {
  path: string;
  testPath?: string;
  /** Folder files whose names end in one of these are left out (e.g. `.dat` indexes beside text). */
  skip?: string[];
}

/** The byte offset of the first invalid UTF-8 sequence, or −1 when all of `bytes` is valid UTF-8. */
export function firstInvalidUtf8(bytes: Uint8Array): number {
  let i = 0;
  while (i < bytes.length) {
    const b = bytes[i];
    let need: number;
    let min: number;
    if (b < 0x80) {
      i++;
      continue;
    } else if (b >= 0xc2 && b <= 0xdf) [need, min] = [1, 0x80];
    else if (b >= 0xe0 && b <= 0xef) [need, min] = [2, 0x800];
    else if (b >= 0xf0 && b <= 0xf4) [need, min] = [3, 0x10000];
    else return i;
    if (i + need >= bytes.length) return i; // truncated sequence
    let cp = b & (0x3f >> need);
    for (let k = 1; k <= need; k++) {
      const c = bytes[i + k];
      if (c === undefined || (c & 0xc0) !== 0x80) return i;
      cp = (cp << 6) | (c & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += need + 1;
  }
  return -1;
}

/** One file's bytes, checked non-empty and UTF-8. */
async function readTextFile(path: string): Promise<Uint8Array> {
  const bytes = new Uint8Array(
    await readFile(path).catch((e: NodeJS.ErrnoException) => {
      throw new Error(`text dataset ${path}: ${e.code === 'ENOENT' ? 'no such file' : e.message}`);
    }),
  );
  if (bytes.length === 0) throw new Error(`text dataset ${path}: the file is empty`);
  const bad = firstInvalidUtf8(bytes);
  if (bad >= 0)
    throw new Error(`text dataset ${path}: not UTF-8 (invalid byte 0x${bytes[bad].toString(16)} at offset ${bad})`);
  return bytes;
}

/** The files a text path means: itself, or a folder's regular, visible, not-skipped files by name. */
export async function textFiles(path: string, skip: readonly string[] = []): Promise<string[]> {
  const root = resolve(path);
  const info = await stat(root).catch(() => undefined);
  if (!info) throw new Error(`text dataset ${root}: no such file or folder`);
  if (info.isFile()) return [root];
  const names = (await readdir(root)).filter((n) => !n.startsWith('.') && !skip.some((s) => n.endsWith(s))).sort();
  const files: string[] = [];
  for (const name of names) {
    const entry = await lstat(join(root, name));
    if (entry.isFile()) files.push(join(root, name));
  }
  if (files.length === 0) throw new Error(`text dataset ${root}: the folder has no text files`);
  return files;
}

async function readText(path: string, skip?: readonly string[]): Promise<{ bytes: Uint8Array; files: string[] }> {
  const files = await textFiles(path, skip);
  const parts: Uint8Array[] = [];
  for (const f of files) parts.push(await readTextFile(f));
  return { bytes: new Uint8Array(Buffer.concat(parts)), files };
}

/** Hex SHA-256 of some bytes (the content hashes that key a run). */
export const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

export { windowCount };

/** Load a text dataset for a model with `context` tokens; both splits must hold at least one window. */
export async function loadTextDataset(source: TextSource, context: number): Promise<TextDataset> {
  const main = await readText(source.path, source.skip);
  let train = main.bytes;
  let test: Uint8Array;
  let files = main.files;
  if (source.testPath) {
    const held = await readText(source.testPath, source.skip);
    test = held.bytes;
    files = [...files, ...held.files];
  } else {
    const cut = Math.floor(train.length * (1 - HOLDOUT_FRACTION));
    test = train.subarray(cut);
    train = train.subarray(0, cut);
  }
  for (const [split, b] of [
    ['training', train],
    ['held-out', test],
  ] as const) {
    if (windowCount(b.length, context) < 1)
      throw new Error(
        `text dataset ${source.path}: the ${split} text has ${b.length} bytes, too small for the context of ${context} (needs at least ${context + 1})`,
      );
  }
  return {
    kind: 'text',
    name: basename(resolve(source.path)),
    train,
    test,
    files,
    sha256: { train: sha256(train), test: sha256(test) },
  };
}

export interface TensorsDataset {
  kind: 'tensors';
  name: string;
  /** Features per sample as float32 (U8 inputs are scaled by 1/255), and the input shape. */
  shape: [number, number, number];
  classes: number;
  train: { x: Float32Array; y: Uint32Array; count: number };
  test: { x: Float32Array; y: Uint32Array; count: number };
}

const DTYPE_BYTES = SAFETENSORS_DTYPE_BYTES;

/** Parse a safetensors file's tensors (views into `bytes`); `file` names it in errors. */
export function parseSafetensors(bytes: Uint8Array, file: string): Record<string, RawTensor> {
  return readSafetensors(bytes, file).tensors;
}

function features(x: RawTensor, file: string): { x: Float32Array; count: number; shape: [number, number, number] } {
  if (x.dtype !== 'F32' && x.dtype !== 'U8')
    throw new Error(`${file}: x has dtype ${x.dtype}; use F32 or U8 (float32 or uint8)`);
  if (x.shape.length < 2 || x.shape.length > 4)
    throw new Error(`${file}: x has shape [${x.shape}]; expected [count, features], [count, h, w] or [count, h, w, c]`);
  const [count, ...rest] = x.shape;
  if (count < 1 || rest.some((d) => d < 1)) throw new Error(`${file}: x [${x.shape}] is empty`);
  const shape: [number, number, number] =
    rest.length === 1 ? [1, rest[0], 1] : rest.length === 2 ? [rest[0], rest[1], 1] : [rest[0], rest[1], rest[2]];
  const values =
    x.dtype === 'U8'
      ? Float32Array.from(x.data, (b) => b / 255)
      : new Float32Array(x.data.slice().buffer, 0, x.data.length / 4);
  for (let i = 0; i < values.length; i++)
    if (!Number.isFinite(values[i])) throw new Error(`${file}: x holds a non-finite value at element ${i}`);
  return { x: values, count, shape };
}

function labels(y: RawTensor, count: number, file: string): Uint32Array {
  const ints = ['U8', 'U16', 'U32', 'I8', 'I16', 'I32', 'I64'];
  if (!ints.includes(y.dtype)) throw new Error(`${file}: y has dtype ${y.dtype}; labels must be integers`);
  if (y.shape.length !== 1 || y.shape[0] !== count)
    throw new Error(`${file}: y has shape [${y.shape}]; expected [${count}] (one label per row of x)`);
  const view = new DataView(y.data.buffer, y.data.byteOffset, y.data.byteLength);
  const size = DTYPE_BYTES[y.dtype];
  const read = {
    U8: (o: number) => view.getUint8(o),
    I8: (o: number) => view.getInt8(o),
    U16: (o: number) => view.getUint16(o, true),
    I16: (o: number) => view.getInt16(o, true),
    U32: (o: number) => view.getUint32(o, true),
    I32: (o: number) => view.getInt32(o, true),
    I64: (o: number) => Number(view.getBigInt64(o, true)),
  }[y.dtype as 'U8'];
  return Uint32Array.from({ length: count }, (_, i) => {
    const v = read(i * size);
    if (!(v >= 0 && v < 65536)) throw new Error(`${file}: label ${v} at index ${i} is outside [0, 65536)`);
    return v;
  });
}

async function readBytes(path: string): Promise<Uint8Array> {
  const bytes = new Uint8Array(
    await readFile(path).catch((e: NodeJS.ErrnoException) => {
      throw new Error(`tensors dataset ${path}: ${e.code === 'ENOENT' ? 'no such file' : e.message}`);
    }),
  );
  if (bytes.length === 0) throw new Error(`tensors dataset ${path}: the file is empty`);
  return bytes;
}

/** `x` and `y` of a `.safetensors` file, or of `x.npy` and `y.npy` in a folder; and the file each came from. */
async function readXY(path: string): Promise<{ x: RawTensor; y: RawTensor; xFile: string; yFile: string }> {
  const info = await stat(path).catch(() => undefined);
  if (info?.isDirectory()) {
    const [xFile, yFile] = [join(path, 'x.npy'), join(path, 'y.npy')];
    const x = parseNpy(await readBytes(xFile), xFile);
    return { x, y: parseNpy(await readBytes(yFile), yFile), xFile, yFile };
  }
  if (path.endsWith('.npy'))
    throw new Error(`${path}: a .npy file holds one array; name the folder that holds x.npy and y.npy`);
  const tensors = parseSafetensors(await readBytes(path), path);
  for (const name of ['x', 'y'])
    if (!tensors[name])
      throw new Error(`${path}: no tensor "${name}" (has: ${Object.keys(tensors).join(', ') || 'none'})`);
  return { x: tensors.x, y: tensors.y, xFile: path, yFile: path };
}

async function readTensorsFile(path: string) {
  const { x, y, xFile, yFile } = await readXY(path);
  const f = features(x, xFile);
  return { ...f, y: labels(y, f.count, yFile) };
}

/** Load a tensors dataset (safetensors, or a folder of x.npy and y.npy); classes = largest label + 1 over both splits (at least 2). */
export async function loadTensorsDataset(source: { path: string; testPath?: string }): Promise<TensorsDataset> {
  const main = await readTensorsFile(source.path);
  const per = main.x.length / main.count;
  let train = { x: main.x, y: main.y, count: main.count };
  let test: typeof train;
  if (source.testPath) {
    const held = await readTensorsFile(source.testPath);
    if (held.shape.join() !== main.shape.join())
      throw new Error(`${source.testPath}: x rows are [${held.shape}], the training rows [${main.shape}]`);
    test = { x: held.x, y: held.y, count: held.count };
  } else {
    const cut = Math.floor(main.count * (1 - HOLDOUT_FRACTION));
    if (cut < 1 || cut >= main.count)
      throw new Error(`${source.path}: ${main.count} samples are too few to hold 5% out`);
    test = { x: main.x.subarray(cut * per), y: main.y.subarray(cut), count: main.count - cut };
    train = { x: main.x.subarray(0, cut * per), y: main.y.subarray(0, cut), count: cut };
  }
  let top = 0;
  for (const y of [train.y, test.y]) for (const v of y) top = Math.max(top, v);
  const classes = Math.max(2, top + 1);
  return { kind: 'tensors', name: basename(resolve(source.path)), shape: main.shape, classes, train, test };
}
