/**
 * The verifier process: a trusted recomputation service beside the coordinator (as BOINC's validator
 * runs beside its server), spawned by coordinator/trust/verifier-client.ts through `verifier/entry.js` and
 * spoken to over Node's IPC channel (core/protocol/verifier.ts).
 *
 * It waits for `init` (the job, the dataset folder), opens a WebGPU device, loads the IDX training set,
 * builds the job's model, times one full-batch recomputation (warm: pipelines compiled first) and says
 * `ready`. Anything that stops it from serving (no adapter, a job it cannot verify, a dataset it cannot
 * read) is one `fatal` message and exit code 1. Then each `recompute` request is answered with a
 * `result` or an `error` naming what was wrong; an error never stops the process. Requests are handled
 * one at a time, in arrival order (the client sends one at a time anyway).
 */
import { readFile } from 'node:fs/promises';
import { effectiveDatasetSize, parseJobSpec } from '../core/training/job';
import { decodeSnapshot } from '../core/state/snapshot';
import {
  type RecomputeRequestMessage,
  type VerifierAnswer,
  verificationUnsupported,
  verifierRequestSchema,
} from '../core/protocol/verifier';
import { loadIdxDataset } from '../node/idx';
import { MOMENT_NAMES } from '../kernels/model/flat-optimizer';
import { openGpu } from './gpu';
import { Recomputer } from './recompute';

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
async function start(rawJob: unknown, datasetDir: string): Promise<{ recomputer: Recomputer; adapter: string }> {
  const job = parseJobSpec(rawJob);
  const why = verificationUnsupported(job);
  if (why) throw new Error(why);
  const { gpu, adapter } = await openGpu(fatal);
  const dataset = await loadIdxDataset(datasetDir);
  const n = effectiveDatasetSize(job, dataset.train.count);
  const { rows, cols } = dataset.train;
  const train = { ...dataset.train, count: n, images: dataset.train.images.subarray(0, n * rows * cols) };
  return { recomputer: new Recomputer(gpu, job, train, job.seed), adapter };
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
  const request = {
    snapshot: { params, moments, optimizer: { kind, t: 0 } },
    stepHash: '0'.repeat(16),
    world: 1,
    slices,
    count: batch,
  };
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
    const result = await recomputer.recompute({ ...req, snapshot });
    return { type: 'result', id: req.id, ...result };
  } catch (error) {
    return { type: 'error', id: req.id, message: describe(error) };
  }
}

/** `ready`, or `fatal` and exit: the device, the data and the model, then one timed recomputation. */
async function init(rawJob: unknown, datasetDir: string): Promise<Recomputer> {
  try {
    const { recomputer, adapter } = await start(rawJob, datasetDir);
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
      recomputer = init(msg.job, msg.datasetDir);
      recomputer.catch(() => undefined);
      return;
    }
    const ready = recomputer;
    if (!ready) return fatal('recompute before init');
    queue = queue.then(async () => send(await answer(await ready, msg))).catch(() => undefined);
  });
}

main();
