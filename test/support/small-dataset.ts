/**
 * A small slice of Fashion-MNIST for system tests and benchmarks: the first `trainCount` training and
 * `testCount` test images as raw IDX files, so each tab downloads a few MB instead of 55.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadIdxDataset } from '../../node/idx';
import { idxFile } from './fake-dataset';

/** Write the first images of the IDX dataset in `sourceDir` into `targetDir` (created). */
export async function writeDatasetSlice(
  sourceDir: string,
  targetDir: string,
  trainCount: number,
  testCount: number,
): Promise<string> {
  const full = await loadIdxDataset(sourceDir);
  mkdirSync(targetDir, { recursive: true });
  for (const [prefix, split, count] of [
    ['train', full.train, trainCount],
    ['t10k', full.test, testCount],
  ] as const) {
    if (count > split.count)
      throw new Error(`writeDatasetSlice: ${count} ${prefix} images asked, ${split.count} available`);
    const pixels = split.rows * split.cols;
    writeFileSync(
      join(targetDir, `${prefix}-images-idx3-ubyte`),
      idxFile(0x803, [count, split.rows, split.cols], split.images.subarray(0, count * pixels)),
    );
    writeFileSync(
      join(targetDir, `${prefix}-labels-idx1-ubyte`),
      idxFile(0x801, [count], split.labels.subarray(0, count)),
    );
  }
  return targetDir;
}
