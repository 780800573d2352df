/**
 * The training Web Worker (Comlink-exposed): it owns the WebGPU device, the dataset bytes, the model
 * and its training state, so the page's main thread stays free for the UI and (next issue) the
 * WebRTC mesh, and training continues while the tab is in the background.
 *
 * Two ways to train:
 * - `trainSolo`: the whole loop in here (one tab alone);
 * - the elastic loop (next issue) drives one step at a time from the main thread:
 *   `computeGradients(indices)` → allreduce of the returned sums on the main thread →
 *   `applyGradients(sums, samples)`, with `saveBackup/restoreBackup`, `snapshot/restore` and `hash`
 *   for commits, failures and joiners. These are thin wrappers over kernels/model/model.ts and
 *   kernels/model/training-state.ts.
 *
 * Created by the page as
 * `new Worker(new URL('./training-worker.ts', import.meta.url), { type: 'module' })`.
 */
import * as Comlink from 'comlink';
import type { ChunkedDatasetMetadata } from '../../core/data/chunked-dataset';
import { stateHash, stateHashOfDigests, trainingStateHash } from '../../core/state/hash';
import { stepSketches } from '../../core/state/step-sketches';
import { isTransformer, parameterLayout, resolveModelSpec, type ModelSpec } from '../../core/training/model-spec';
import { decodeSnapshot, encodeSnapshot } from '../../core/state/snapshot';
import { createModel, type Model } from '../../kernels/model/model';
import { createGpu, kernelDeviceDescriptor, type Gpu } from '../../kernels/runtime';
import { createTrainingState, type ParamsHasher, type TrainingState } from '../../kernels/model/training-state';
import { type BatchSource, imageData, type TrainingData } from './data/batches';
import { chunkedData } from './data/chunked-data';
import { ChunkFetcher, type ChunkProgress, openCache } from './data/dataset-client';
import { ElasticSteps, type ApplyOptions, type ApplyResult, type NextIndices } from './elastic-steps';
import type { EagerOuter } from './eager-outer';
import { outerCalls, saveBackupOf } from './outer-calls';
import { OuterState } from './outer-step';
import { chooseParamsHasher, readBackParamsHasher } from './params-hasher';
import { runSolo } from './solo-loop';
import type { KernelsReport } from '../../core/protocol/tab-messages';
import { chooseVariants, kernelsReport, type TuningStore } from '../../kernels/tuning/choice';
import type { KernelVariants } from '../../kernels/tuning/variants';
import { browserTuningStore } from './tuning-store';
import type {
  AdapterSummary,
  BuildModelOptions,
  DatasetBytes,
  EvaluationResult,
  GradientResult,
  KernelOptions,
  ModelSummary,
  OuterReport,
  OuterReportOptions,
  ProbeResult,
  RestoredState,
  SoloOptions,
  SoloProgress,
  SoloResult,
} from './types';

interface Built {
  spec: ModelSpec;
  model: Model;
  state: TrainingState;
  steps: ElasticSteps;
  /** Where the parameters are hashed (web/worker/params-hasher.ts: on the GPU unless the adapter is the CPU). */
  hasher: ParamsHasher;
  /** Local sync mode's outer momentum; null in every-step mode. */
  outer: OuterState | null;
  /** An overlapped job's own outer state (outer-calls.ts `resetOuter`); null otherwise. */
  eager: EagerOuter | null;
  train?: BatchSource;
}

let adapterPromise: Promise<GPUAdapter | null> | undefined;
let gpu: Gpu | undefined;
/** Where this worker hashes the parameters, chosen with the device from its adapter (params-hasher.ts). */
let hasher: ParamsHasher = readBackParamsHasher;
let deviceLost: string | undefined;
let dataset: TrainingData | undefined;
let built: Built | undefined;
let stopRequested = false;
/** The variants `chooseKernels` chose, for the model built with the same shapes (`shapesKey`). */
let kernelChoice: { key: string; variants: KernelVariants } | null = null;
let tuningStore: Promise<TuningStore> | undefined;

/** What a kernel choice was made for: the model, its max batch and the precision. */
function shapesKey(spec: ModelSpec, maxBatch: number, precision: string): string {
  return `${JSON.stringify(spec)}|${maxBatch}|${precision}`;
}

function unavailableReason(): string | undefined {
  if (!('gpu' in navigator) || !navigator.gpu) {
    if (!self.isSecureContext) {
      return (
        `WebGPU needs HTTPS: this page was loaded from ${self.location.origin}, which is not a secure context. ` +
        'Open the https:// address of this coordinator (it serves HTTPS with --tls-cert/--tls-key, or behind Caddy or nginx), ' +
        'or http://localhost on the coordinator’s own machine.'
      );
    }
    return 'this browser does not offer WebGPU (navigator.gpu is missing): use a recent Chrome, Edge or Safari, or enable WebGPU in the browser settings';
  }
  return undefined;
}

function requestAdapter(): Promise<GPUAdapter | null> {
  adapterPromise ??= navigator.gpu.requestAdapter({ powerPreference: 'high-performance' });
  return adapterPromise;
}

function summarize(adapter: GPUAdapter): AdapterSummary {
  const info = adapter.info;
  return {
    vendor: info?.vendor ?? '',
    architecture: info?.architecture ?? '',
    description: info?.description ?? '',
    device: info?.device ?? '',
    isFallback: info?.isFallbackAdapter ?? false,
    maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
    maxBufferSize: adapter.limits.maxBufferSize,
  };
}

/** The device, created on first use (after consent); a lost device is reported, not silently replaced. */
async function device(): Promise<Gpu> {
  if (deviceLost) throw new Error(`the WebGPU device was lost: ${deviceLost}`);
  if (gpu) return gpu;
  const reason = unavailableReason();
  if (reason) throw new Error(reason);
  const adapter = await requestAdapter();
  if (!adapter) throw new Error('no WebGPU adapter');
  const dev = await adapter.requestDevice(kernelDeviceDescriptor(adapter));
  dev.lost.then((info) => {
    deviceLost = `${info.reason}: ${info.message}`;
    console.error(`tabswarm worker: WebGPU device lost (${deviceLost})`);
  });
  dev.addEventListener('uncapturederror', (e) => {
    // A validation error would otherwise produce silent zeros; make it loud (tests watch console errors).
    console.error(`tabswarm worker: WebGPU error: ${(e as GPUUncapturedErrorEvent).error.message}`);
  });
  // Before `gpu` is set: a model built once the device exists gets the final hasher.
  const chosen = await chooseParamsHasher(summarize(adapter));
  gpu = createGpu(dev);
  hasher = chosen;
  return gpu;
}

function requireDataset(): TrainingData {
  if (!dataset) throw new Error('no dataset loaded: call loadData first');
  return dataset;
}

function requireModel(): Built {
  if (!built) throw new Error('no model built: call buildModel first');
  return built;
}

function requireOuter(): Built & { outer: OuterState } {
  const b = requireModel();
  if (!b.outer) throw new Error('this model was built for every-step sync: there is no outer step');
  return b as Built & { outer: OuterState };
}

/** The dataset, checked to fit the model: text for a language model of the same context, else rows or images. */
function fittingDataset({ spec }: Built): TrainingData {
  const data = requireDataset();
  const lm = isTransformer(spec);
  if (lm !== (data.kind === 'text') || (lm && spec.context !== data.context))
    throw new Error(
      `a ${data.kind} dataset${data.context ? ` of context ${data.context}` : ''} does not fit model ${spec.name}`,
    );
  return data;
}

function trainBatches(): BatchSource {
  const b = requireModel();
  b.train ??= fittingDataset(b).batches(b.model.maxBatch);
  return b.train;
}

/**
 * Download what the samples of `lists` need (a chunked dataset; the images are all in memory), before the
 * synchronous step code (elastic-steps.ts) gathers them: this step's and the prefetched next step's.
 */
async function prepareSamples(...lists: (Uint32Array | null | undefined)[]): Promise<void> {
  const all = lists.filter((l): l is Uint32Array => !!l && l.length > 0);
  if (all.length === 0) return;
  const ready = trainBatches().prepare(all.length === 1 ? all[0] : Uint32Array.from(all.flatMap((l) => [...l])));
  if (ready) await ready;
}

function setDataset(data: TrainingData): { train: number; test: number } {
  dataset = data;
  if (built) built.train = undefined;
  return { train: data.trainCount, test: data.testCount };
}

const api = {
  /**
   * Is WebGPU usable here, and on which adapter? Requests an adapter only (no device, no memory), so
   * the page may call it before consent.
   */
  async probe(): Promise<ProbeResult> {
    const reason = unavailableReason();
    if (reason) return { ok: false, reason };
    try {
      const adapter = await requestAdapter();
      if (!adapter) {
        return {
          ok: false,
          reason:
            'the browser offers WebGPU but found no usable GPU adapter (the GPU or its driver may be blocklisted or disabled; see chrome://gpu)',
        };
      }
      return { ok: true, adapter: summarize(adapter) };
    } catch (err) {
      return { ok: false, reason: `requesting a WebGPU adapter failed: ${(err as Error).message}` };
    }
  },

  /** Take the dataset (its ArrayBuffers transferred, not copied). */
  loadData(data: DatasetBytes): { train: number; test: number } {
    for (const [name, split] of [
      ['train', data.train],
      ['test', data.test],
    ] as const) {
      if (split.images.length !== split.count * split.rows * split.cols || split.labels.length !== split.count) {
        throw new Error(
          `dataset ${name}: ${split.images.length} pixels and ${split.labels.length} labels do not make ${split.count} ${split.rows}×${split.cols} images`,
        );
      }
    }
    return setDataset(imageData(data));
  },

  /**
   * Take a user's dataset (text or tensors) by its metadata: chunks are fetched from this origin as
   * steps need them, kept in Cache Storage, and `onProgress` reports what has been obtained.
   */
  loadChunked(meta: ChunkedDatasetMetadata, onProgress?: (p: ChunkProgress) => void): { train: number; test: number } {
    const fetcher = new ChunkFetcher('', 64, undefined, {
      cache: openCache(),
      onProgress: (p) => void onProgress?.(p),
    });
    return setDataset(chunkedData(meta, fetcher));
  },

  /**
   * Choose the kernel variants for the model the page is about to build on this adapter: the cached
   * choice, a tuning (`onTuning` is called as it starts: "tuning for your GPU…"), or the defaults
   * (kernels/tuning/choice.ts). `buildModel` with the same shapes uses them. Resolves to the report the
   * hello carries.
   */
  async chooseKernels(opts: KernelOptions, onTuning?: () => void): Promise<KernelsReport> {
    const g = await device();
    const adapter = await requestAdapter();
    if (!adapter) throw new Error('no WebGPU adapter');
    const spec = resolveModelSpec(opts.model);
    const req = { spec, layout: parameterLayout(spec), ...opts };
    tuningStore ??= browserTuningStore();
    const choice = await chooseVariants(g, summarize(adapter), req, {
      store: await tuningStore,
      mode: opts.tune,
      onTuning: () => void onTuning?.(),
    });
    kernelChoice = { key: shapesKey(spec, opts.maxBatch, opts.precision), variants: choice.variants };
    return kernelsReport(g, choice, opts.precision);
  },

  /** Build (or rebuild) the model with fresh seeded parameters. */
  async buildModel(opts: BuildModelOptions): Promise<ModelSummary> {
    const g = await device();
    const spec = resolveModelSpec(opts.model);
    const layout = parameterLayout(spec);
    built?.steps.destroy();
    built?.state.destroy();
    built?.model.destroy();
    built = undefined;
    const precision = opts.precision ?? 'f32';
    const chosen = kernelChoice?.key === shapesKey(spec, opts.maxBatch, precision) ? kernelChoice.variants : undefined;
    const model = createModel(g, spec, layout, {
      maxBatch: opts.maxBatch,
      optimizer: opts.optimizer,
      seed: opts.seed,
      precision,
      variants: chosen,
    });
    const state = createTrainingState(model, hasher);
    const outer = opts.outer ? new OuterState(opts.outer, layout.totalElements) : null;
    const steps = new ElasticSteps(
      model,
      () => trainBatches(),
      hasher,
      () => saveBackupOf(requireModel()),
    );
    built = { spec, model, state, steps, hasher, outer, eager: null };
    return { name: spec.name, parameterCount: layout.parameterCount, totalElements: layout.totalElements };
  },

  /**
   * Train alone: every epoch in `epochOrder(seed, epoch, n)`, `globalBatch` samples per step, the loss
   * read back every `lossEvery` steps, the test set evaluated at each epoch's end.
   */
  async trainSolo(opts: SoloOptions, onProgress?: (p: SoloProgress) => void): Promise<SoloResult> {
    const data = requireDataset();
    stopRequested = false;
    const subset = opts.subset === undefined ? data.trainCount : Math.min(opts.subset, data.trainCount);
    await api.buildModel({
      model: opts.model,
      optimizer: opts.optimizer,
      maxBatch: Math.min(opts.globalBatch, subset),
      seed: opts.seed,
    });
    const { model } = requireModel();
    const testCount = Math.min(opts.testSubset ?? data.testCount, data.testCount);
    return runSolo({
      model,
      train: fittingDataset(requireModel()).batches(model.maxBatch),
      trainCount: subset,
      test: testCount > 0 ? await data.testSet(testCount) : undefined,
      options: opts,
      shouldStop: () => stopRequested,
      // Progress is fire-and-forget: awaiting the page would add a round trip to every report.
      onProgress: (p) => void onProgress?.(p),
    });
  },

  /** Ask a running `trainSolo` to stop after its current step. */
  stop(): void {
    stopRequested = true;
  },

  /**
   * Test-set loss and accuracy of the current parameters (first `count` test samples; default all). A
   * language model's accuracy is per next byte, and its mean loss per byte is also given in bits.
   */
  async evaluate(count?: number): Promise<EvaluationResult> {
    const b = requireModel();
    const data = fittingDataset(b);
    const test = await data.testSet(count ?? data.testCount);
    const r = await b.model.evaluate(test.x, test.labels, test.count);
    const lossAvg = r.lossSum / r.count;
    const result = { accuracy: r.correct / (r.count * test.positions), lossAvg, count: r.count };
    return test.bytes ? { ...result, bitsPerByte: lossAvg / Math.LN2 } : result;
  },

  /**
   * Forward and backward over the training samples `indices` (this rank's share of a step): the
   * gradient SUMS over them, transferred (the elastic loop allreduces them on the main thread), or
   * kept in the grads buffer with `keepOnDevice` (a world of one: nothing to reduce, nothing to read).
   * Returns the prefetch `applyAndHash` started when it is for these samples (web/worker/elastic-steps.ts).
   */
  async computeGradients(indices: Uint32Array, keepOnDevice = false): Promise<GradientResult> {
    await prepareSamples(indices);
    const result = await requireModel().steps.computeGradients(indices, keepOnDevice);
    return result.gradients ? Comlink.transfer(result, [result.gradients]) : result;
  },

  /**
   * One optimizer step with `sums` (flat layout, allreduced; null: the gradients kept on the device)
   * over `sampleCount` samples; returns the new parameters' hash. With `next`, the next step's
   * gradients are computed on the GPU while this hash is computed here.
   */
  async applyAndHash(
    sums: ArrayBuffer | null,
    sampleCount: number,
    next: NextIndices | null = null,
    opts: ApplyOptions = {},
  ): Promise<ApplyResult> {
    await prepareSamples(next?.indices, opts.prefetched);
    return requireModel().steps.applyAndHash(sums, sampleCount, next, opts);
  },

  /** Replace the gradients with `sums` (flat layout, allreduced) and take one optimizer step over `sampleCount` samples. */
  async applyGradients(sums: ArrayBuffer, sampleCount: number): Promise<void> {
    await api.applyAndHash(sums, sampleCount, null);
  },

  /** The flat parameters (`totalElements` floats), transferred. */
  async parameters(): Promise<ArrayBuffer> {
    const params = await requireModel().model.readParams();
    return Comlink.transfer(params.buffer as ArrayBuffer, [params.buffer as ArrayBuffer]);
  },

  /**
   * The agreed hash of the current state, what a rank reports at a commit: `trainingStateHash` (params,
   * moments, t) in every-step mode, `stateHash(params, outer momentum)` in local mode. The buffers'
   * chunks are hashed on the GPU, only their digests read back.
   */
  async hash(): Promise<string> {
    const b = requireModel();
    if (!b.outer) return b.state.hashState();
    const momentum = b.outer.momentum;
    const onGpu = b.hasher.digests;
    if (!onGpu) return stateHash(await b.model.readParams(), momentum);
    return b.model.withParamDigests(onGpu.chunkBytes, (digests) =>
      stateHashOfDigests(b.model.totalElements * 4, digests, momentum),
    );
  },

  /** Keep a GPU copy of the current state (the last completed step); no read-back. */
  saveBackup(): void {
    saveBackupOf(requireModel());
  },

  /** Return to the state of the last `saveBackup` (after a failed step). */
  restoreBackup(): void {
    const b = requireModel();
    b.state.restoreBackup();
    b.outer?.restoreBackup();
    b.steps.stateChanged();
  },

  /** Local sync mode's outer step (outer-calls.ts): pseudo-gradient, Nesterov step and undo, and the overlapped calls. */
  ...outerCalls(() => requireOuter()),

  /**
   * Local sync mode, after `applyOuter`, when the job verifies: the commit point's sketches (the live
   * state is the new θ_c with this rank's moments, the outer momentum is u), its commitment to the inner
   * state it started the outer step from (the backup) and its t (web/worker/types.ts `OuterReport`).
   */
  async outerReport(o: OuterReportOptions): Promise<OuterReport> {
    const b = requireOuter();
    const [start, live] = await Promise.all([b.state.readBackup(), b.state.exportState()]);
    const hash = stateHash(live.params, b.outer.momentum);
    const [own, sent, received, sum] = [o.own, o.sent, o.received, o.sum].map((x) => new Float32Array(x));
    const vectors = {
      own,
      sent,
      received,
      sum,
      params: live.params,
      local: { outer: b.outer.momentum, moments: live.moments },
    };
    return {
      sketch: stepSketches(vectors, hash, o.world, o.compression),
      innerHash: trainingStateHash(start.params, start.moments, start.step),
      innerT: live.step,
    };
  },

  /** The training state as one snapshot (core/state/snapshot.ts), transferred. */
  async snapshot(position: { step: number; epoch: number; cursor: number }): Promise<ArrayBuffer> {
    const b = requireModel();
    const exported = await b.state.exportState();
    const bytes = encodeSnapshot({
      spec: b.spec,
      ...position,
      optimizer: { kind: b.model.optimizer.kind, t: exported.step },
      params: exported.params,
      moments: exported.moments,
      outer: b.outer?.momentum,
    });
    return Comlink.transfer(bytes, [bytes]);
  },

  /** Load a snapshot into the current model (same spec and optimizer); returns its position and hash. */
  restore(bytes: ArrayBuffer): RestoredState {
    const b = requireModel();
    const snap = decodeSnapshot(bytes);
    if (JSON.stringify(snap.spec) !== JSON.stringify(b.spec))
      throw new Error(`restore: snapshot is for model ${snap.spec.name}, this worker runs ${b.spec.name}`);
    if (snap.optimizer.kind !== b.model.optimizer.kind)
      throw new Error(`restore: snapshot optimizer ${snap.optimizer.kind}, this worker uses ${b.model.optimizer.kind}`);
    if (!!snap.outer !== !!b.outer)
      throw new Error(
        `restore: the snapshot ${snap.outer ? 'has' : 'has no'} outer momentum, this job ${b.outer ? 'syncs locally' : 'syncs every step'}`,
      );
    b.state.importState({ params: snap.params, moments: snap.moments, step: snap.optimizer.t });
    if (snap.outer) b.outer!.load(snap.outer);
    b.steps.stateChanged();
    return { step: snap.step, epoch: snap.epoch, cursor: snap.cursor, stateHash: snap.stateHash };
  },
};

export type TrainingWorkerApi = typeof api;

Comlink.expose(api);
