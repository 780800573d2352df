/**
 * The verifier process: a trusted recomputation service beside the coordinator (as BOINC's validator
 * runs beside its server), spawned by coordinator/trust/verifier-client.ts through `verifier/entry.js` and
 * spoken to over Node's IPC channel (core/protocol/verifier.ts).
 *
 * It waits for `init` (the job, its training data: the IDX folder, or a text's or tensors' bytes), opens
 * a WebGPU device, builds the job's model (any the job file accepts: classifiers and language models),
 * times one full-batch recomputation (warm: pipelines compiled first) and says `ready`. Anything that
 * stops it from serving (no adapter, a dataset it cannot read) is one `fatal` message and exit code 1. Then each `recompute` request is answered with a
 * `result` or an `error` naming what was wrong; an error never stops the process. Requests are handled
 * one at a time, in arrival order (the client sends one at a time anyway).
 */
import { readFile } from 'node:fs/promises';
import { effectiveDatasetSize, parseJobSpec } from '../core/training/job';
import { decodeSnapshot } from '../core/state/snapshot';
import {
  type RecomputeRequestMessage,
  type VerifierAnswer,
  type VerifierDataset,
  verifierRequestSchema,
} from '../core/protocol/verifier';
import { ImageBatches } from '../core/data/image-batches';
import { TensorBatches, TextBatches } from '../core/data/memory-batches';
import { isTransformer } from '../core/training/model-spec';
import type { JobSpec } from '../core/training/job';
import { loadIdxDataset } from '../node/idx';
import { MOMENT_NAMES } from '../kernels/model/flat-optimizer';
import { openGpu } from './gpu';
import { Recomputer, type TrainingSamples } from './recompute';

const MAX_MESSAGE = 2000;

function send(answer: VerifierAnswer): void {
  process.send?.(answer);
}

/** Say why and stop, once the message is on its way (an exit right after `send` can lose it). */
function fatal(message: string): void {
  // Nothing more is handled while the message drains.
  process.removeAllListeners('message');
  const answer: VerifierAnswer = { type: 'fatal', message: `verifier: ${message}` };
  if (process.send) process.send(answer, undefined, {}, () => process.exit(1));
  else process.exit(1);
}

function describe(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text.length > MAX_MESSAGE ? `${text.slice(0, MAX_MESSAGE)}…` : text;
}

/** Everything `ready` needs: the device, the data, the model; throws with the operator's one line. */
async function start(rawJob: unknown, dataset: VerifierDataset): Promise<{ recomputer: Recomputer; adapter: string }> {
  const job = parseJobSpec(rawJob);
  const { gpu, adapter } = await openGpu(fatal);
  return { recomputer: new Recomputer(gpu, job, await samplesOf(job, dataset), job.seed), adapter };
}

/** The job's training samples (its `dataset.subset` applied) as the tabs assemble them. */
async function samplesOf(job: JobSpec, dataset: VerifierDataset): Promise<TrainingSamples> {
  const maxBatch = job.globalBatch;
  if (dataset.kind === 'images') {
    const loaded = await loadIdxDataset(dataset.dir);
    const n = effectiveDatasetSize(job, loaded.train.count);
    const { rows, cols } = loaded.train;
    const train = { ...loaded.train, count: n, images: loaded.train.images.subarray(0, n * rows * cols) };
    const spec = job.model;
    if (isTransformer(spec) || spec.input[0] !== rows || spec.input[1] !== cols || spec.input[2] !== 1)
      throw new Error(`model ${spec.name} does not take the dataset's ${rows}×${cols}×1 images`);
    return { batches: new ImageBatches(train, Math.min(maxBatch, n)), count: n };
  }
  if (dataset.kind === 'tensors') {
    const rows = new TensorBatches(dataset, 1);
    const n = effectiveDatasetSize(job, rows.count);
    const x = dataset.x.subarray(0, n * dataset.features);
    const y = dataset.y.subarray(0, n);
    return { batches: new TensorBatches({ x, y, features: dataset.features }, Math.min(maxBatch, n)), count: n };
  }
  if (!isTransformer(job.model)) throw new Error(`a text dataset needs a language model, not ${job.model.name}`);
  const context = job.model.context;
  const n = effectiveDatasetSize(job, new TextBatches(dataset.bytes, context, 1).count);
  return { batches: new TextBatches(dataset.bytes, context, Math.max(1, Math.min(maxBatch, n))), count: n };
}

/**
 * One recomputation of a full global batch on the initial state, after one that compiles the pipelines.
 * Its gradient must be finite and not zero (a real batch at fresh weights has a gradient): a device that
 * computes nothing would otherwise make every honest rank look like a liar.
 */
async function timeStep(recomputer: Recomputer): Promise<number> {
  const params = await recomputer.initialParams();
  const n = recomputer.layout.totalElements;
  const kind = recomputer.job.optimizer.kind;
  const moments = MOMENT_NAMES[kind].map(() => new Float32Array(n));
  const batch = Math.min(recomputer.job.globalBatch, recomputer.trainCount);
  const slices = [Uint32Array.from({ length: batch }, (_, i) => i)];
  const local = recomputer.job.sync.mode === 'local';
  const buckets = 32;
  const request = {
    snapshot: { params, moments, optimizer: { kind, t: 0 }, outer: local ? new Float32Array(n) : null },
    stepHash: '0'.repeat(16),
    world: 1,
    mode: recomputer.job.sync.mode,
    rank: 0,
    steps: [{ slices, count: batch }],
    fresh: false,
    ...(local ? { sum: { values: new Array(buckets).fill(0), mass: new Array(buckets).fill(0) } } : {}),
  } as const;
  await recomputer.recompute(request);
  const { own, ms } = await recomputer.recompute(request);
  const mass = own[0].mass.reduce((a, b) => a + b, 0);
  if (!(mass > 0 && Number.isFinite(mass)))
    throw new Error(`the device computed a gradient of mass ${mass} on a real batch: its results cannot be trusted`);
  return ms;
}

async function answer(recomputer: Recomputer, req: RecomputeRequestMessage): Promise<VerifierAnswer> {
  let bytes: Buffer;
  try {
    bytes = await readFile(req.snapshotPath);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? describe(error);
    return { type: 'error', id: req.id, message: `cannot read snapshot ${req.snapshotPath}: ${code}` };
  }
  try {
    const snapshot = decodeSnapshot(bytes);
    const { stepHash, world, mode, rank, steps, fresh, sum, perturb } = req;
    const result = await recomputer.recompute({ snapshot, stepHash, world, mode, rank, steps, fresh, sum, perturb });
    return { type: 'result', id: req.id, ...result };
  } catch (error) {
    return { type: 'error', id: req.id, message: describe(error) };
  }
}

/** `ready`, or `fatal` and exit: the device, the data and the model, then one timed recomputation. */
async function init(rawJob: unknown, dataset: VerifierDataset): Promise<Recomputer> {
  try {
    const { recomputer, adapter } = await start(rawJob, dataset);
    send({ type: 'ready', adapter, stepMs: await timeStep(recomputer) });
    return recomputer;
  } catch (error) {
    fatal(describe(error));
    // Never settles: the process exits once the message is sent.
    return new Promise(() => undefined);
  }
}

function main(): void {
  if (!process.send) {
    console.error('verifier/main.ts is started by the coordinator (verifier-client.ts), with an IPC channel');
    process.exit(2);
  }
  let recomputer: Promise<Recomputer> | undefined;
  let queue: Promise<void> = Promise.resolve();
  // The parent gone (killed, crashed): nothing is left to answer.
  process.on('disconnect', () => process.exit(0));
  process.on('message', (raw) => {
    const parsed = verifierRequestSchema.safeParse(raw);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const why = `invalid request: ${issue?.path.join('.')}: ${issue?.message}`;
      // A request with an id gets its error and the process serves on; anything else is a broken parent.
      const id = (raw as { id?: unknown } | null)?.id;
      if (Number.isInteger(id) && (id as number) >= 0) send({ type: 'error', id: id as number, message: why });
      else fatal(why);
      return;
    }
    const msg = parsed.data;
    if (msg.type === 'init') {
      if (recomputer) return fatal('init sent twice');
      recomputer = init(msg.job, msg.dataset);
      recomputer.catch(() => undefined);
      return;
    }
    const ready = recomputer;
    if (!ready) return fatal('recompute before init');
    queue = queue.then(async () => send(await answer(await ready, msg))).catch(() => undefined);
  });
}

main();
