/**
 * Test files on disk: temp dirs removed when the test process exits, and a small fake IDX dataset
 * (seeded pixels, label i mod classes) so tests never depend on the real Fashion-MNIST.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { mulberry32 } from './rng';

const tempDirs: string[] = [];

/** A fresh temp dir, removed when the test process exits. */
export function makeTempDir(prefix = 'tabswarm-test-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

process.on('exit', () => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

export interface FakeIdxOptions {
  trainCount?: number;
  testCount?: number;
  rows?: number;
  cols?: number;
  classes?: number;
  /** Write `.gz` files like the Debian package does. Default false (raw files). */
  gzip?: boolean;
  seed?: number;
}

/** One IDX file: big-endian magic and dims, then the bytes. */
export function idxFile(magic: number, dims: number[], data: Uint8Array): Buffer {
  const header = Buffer.alloc(4 + 4 * dims.length);
  header.writeUInt32BE(magic, 0);
  dims.forEach((d, i) => {
    header.writeUInt32BE(d, 4 + 4 * i);
  });
  return Buffer.concat([header, data]);
}

/**
 * Writes `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte` and
 * `t10k-labels-idx1-ubyte` into `dir` (created if needed): seeded random pixels, label i mod classes.
 * Returns `dir`.
 */
export function writeFakeIdxDataset(dir: string, opts: FakeIdxOptions = {}): string {
  const { trainCount = 300, testCount = 50, rows = 28, cols = 28, classes = 10, gzip = false, seed = 7 } = opts;
  mkdirSync(dir, { recursive: true });
  const random = mulberry32(seed);
  const split = (prefix: string, count: number) => {
    const pixels = new Uint8Array(count * rows * cols);
    for (let i = 0; i < pixels.length; i++) pixels[i] = Math.floor(random() * 256);
    const labels = new Uint8Array(count);
    for (let i = 0; i < count; i++) labels[i] = i % classes;
    const write = (name: string, bytes: Buffer) =>
      writeFileSync(join(dir, gzip ? `${name}.gz` : name), gzip ? gzipSync(bytes) : bytes);
    write(`${prefix}-images-idx3-ubyte`, idxFile(0x803, [count, rows, cols], pixels));
    write(`${prefix}-labels-idx1-ubyte`, idxFile(0x801, [count], labels));
  };
  split('train', trainCount);
  split('t10k', testCount);
  return dir;
}

let sharedDataset: string | null = null;
/** A fake dataset shared by every coordinator of this test process (300 train / 50 test images). */
export function sharedFakeDataset(): string {
  sharedDataset ??= writeFakeIdxDataset(join(makeTempDir('tabswarm-dataset-'), 'fake-mnist'));
  return sharedDataset;
}
