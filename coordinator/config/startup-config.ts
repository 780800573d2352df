/**
 * What the CLI reads before anything starts: the job file, the dataset folder. Each failure is a
 * `StartupError` whose message is the one line the operator sees.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { defaultJob, type JobSpec, parseJobSpec, verifying } from '../../core/training/job';
import { type IdxDataset, loadIdxDataset } from '../../node/idx';
import { jobMismatchReason, loadUserDataset, type ServedDataset, servedIdx } from '../datasets/served-dataset';

/** Where the Debian package `dataset-fashion-mnist` installs Fashion-MNIST. */
export const DEFAULT_DATASET_DIR = '/usr/share/datasets/fashion-mnist/';

/** The copy of Fashion-MNIST that ships in the repository (`data/fashion-mnist/`, MIT, with SHA256SUMS). */
export const SHIPPED_DATASET_DIR = resolve(import.meta.dirname, '../../data/fashion-mnist');

/** The built web app (`npm run build`) a coordinator serves unless told otherwise (`--dist`). */
export const DEFAULT_DIST_DIR = resolve(import.meta.dirname, '../../dist');

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
  const mismatch = jobMismatchReason(job);
  if (mismatch) throw new StartupError(`job file ${path}: ${mismatch}`);
  return job;
}

/**
 * --dataset, then $TABSWARM_DATASET, then the Debian package's folder (`defaultDir`), then the copy
 * shipped in the repository (`shippedDir`), so a fresh clone trains with no package installed.
 */
export function resolveDatasetDir(
  flag: string | undefined,
  env: Record<string, string | undefined> = process.env,
  defaultDir = DEFAULT_DATASET_DIR,
  shippedDir = SHIPPED_DATASET_DIR,
): string {
  const chosen = flag ?? env.TABSWARM_DATASET;
  if (chosen) return chosen;
  if (existsSync(defaultDir)) return defaultDir;
  if (existsSync(join(shippedDir, 'SHA256SUMS'))) return shippedDir;
  throw new StartupError(
    `no dataset: neither ${defaultDir} nor ${shippedDir} exists; run \`apt-get install dataset-fashion-mnist\`, or pass --dataset DIR (or set TABSWARM_DATASET) with the four IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, raw or .gz)`,
  );
}

/**
 * Check every file listed in `dir/SHA256SUMS` (the `sha256sum` format: hex, two spaces, name).
 * Throws a `StartupError` naming the first file that is missing or differs.
 */
export async function verifyChecksums(dir: string): Promise<void> {
  const listing = await readFile(join(dir, 'SHA256SUMS'), 'utf8');
  for (const line of listing.split('\n')) {
    const match = /^([0-9a-f]{64})\s+\*?(\S+)$/.exec(line.trim());
    if (!match) continue;
    const [, want, name] = match;
    const bytes = await readFile(join(dir, name)).catch(() => undefined);
    if (!bytes) throw new StartupError(`dataset ${dir}: ${name} is listed in SHA256SUMS but missing`);
    const got = createHash('sha256').update(bytes).digest('hex');
    if (got !== want) throw new StartupError(`dataset ${dir}: ${name} has sha256 ${got}, SHA256SUMS says ${want}`);
  }
}

/** Load the IDX files of `dir`; the shipped copy is checked against its SHA256SUMS first. */
export async function loadDataset(dir: string, shippedDir = SHIPPED_DATASET_DIR): Promise<IdxDataset> {
  if (resolve(dir) === resolve(shippedDir)) await verifyChecksums(shippedDir);
  try {
    return await loadIdxDataset(dir);
  } catch (error) {
    // The loader's messages name the folder or file already; prefix only those that do not.
    const message = (error as Error).message;
    throw new StartupError(message.includes(dir) ? message : `dataset ${dir}: ${message}`);
  }
}

/**
 * The job's dataset, loaded and checked: a text or tensors dataset from the job's own `path`, else the
 * IDX set of `resolveDatasetDir(datasetFlag)` (the flag applies to it only). One line on failure.
 */
export async function loadJobDataset(job: JobSpec, datasetFlag: string | undefined): Promise<ServedDataset> {
  if (!('kind' in job.dataset)) {
    const dir = resolveDatasetDir(datasetFlag);
    return servedIdx(await loadDataset(dir), resolve(dir));
  }
  try {
    return await loadUserDataset(job);
  } catch (error) {
    throw new StartupError((error as Error).message);
  }
}

/** What the start-up says about checking contributions: on by default where anyone may join, a warning when turned off. */
export function verifyLine(job: JobSpec, join: 'open' | 'invite'): string {
  const v = verifying(job);
  if (v)
    return `tabswarm verifies contributions: a new worker's commits are recomputed at ${v.newcomer.probability} until it passed ${v.newcomer.checks} checks, then at ${v.probability} (docs/threat-model.md)`;
  if (job.verify === false)
    return `warning: this job does not verify contributions ("verify": false): every tab's gradients are trusted${join === 'open' ? ', and anyone with the URL may join' : ''}; meant for private swarms and --join invite`;
  return 'contributions are not verified: invited tabs are trusted (add "verify": {} to the job file to check them)';
}
