/**
 * What the CLI reads before anything starts: the job file, the dataset folder. Each failure is a
 * `StartupError` whose message is the one line the operator sees.
 */
import { existsSync, readFileSync } from 'node:fs';
import { defaultJob, parseJobSpec, type JobSpec } from './core/job';
import { loadIdxDataset, type IdxDataset } from './dataset';
import { unsupportedJobReason } from './user-datasets';

/** Where the Debian package `dataset-fashion-mnist` installs Fashion-MNIST. */
export const DEFAULT_DATASET_DIR = '/usr/share/datasets/fashion-mnist/';

/** A startup failure with a one-line explanation for the operator. */
export class StartupError extends Error {}

export function loadJobFile(path: string | undefined): JobSpec {
  if (!path) return defaultJob;
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new StartupError(
      `cannot read job file ${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
    );
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    throw new StartupError(`job file ${path} is not valid JSON: ${(error as Error).message}`);
  }
  let job: JobSpec;
  try {
    job = parseJobSpec(raw);
  } catch (error) {
    throw new StartupError(`job file ${path}: ${(error as Error).message}`);
  }
  const unsupported = unsupportedJobReason(job);
  if (unsupported) throw new StartupError(`job file ${path}: ${unsupported}`);
  return job;
}

/** --dataset, then $TABSWARM_DATASET, then the Debian package's folder (`defaultDir`). */
export function resolveDatasetDir(
  flag: string | undefined,
  env: Record<string, string | undefined> = process.env,
  defaultDir = DEFAULT_DATASET_DIR,
): string {
  const chosen = flag ?? env.TABSWARM_DATASET;
  if (chosen) return chosen;
  if (existsSync(defaultDir)) return defaultDir;
  throw new StartupError(
    `no dataset: ${defaultDir} is missing; run \`apt-get install dataset-fashion-mnist\`, or pass --dataset DIR (or set TABSWARM_DATASET) with the four IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, raw or .gz)`,
  );
}

export async function loadDataset(dir: string): Promise<IdxDataset> {
  try {
    return await loadIdxDataset(dir);
  } catch (error) {
    // The loader's messages name the folder or file already; prefix only those that do not.
    const message = (error as Error).message;
    throw new StartupError(message.includes(dir) ? message : `dataset ${dir}: ${message}`);
  }
}
