/**
 * The volunteer page: checks WebGPU (in the worker that will own the device), describes the job,
 * waits for consent (the Start button, or `?autostart=1`), then downloads the dataset and trains.
 *
 * Before consent the page loads only its own code and two small JSON answers: the adapter (the
 * worker asks for one but creates no device) and `/api/job`. The dataset, the GPU device, the
 * WebSocket and the WebRTC mesh come after Start.
 *
 * Modes: `?mode=elastic` joins the coordinator the page was served from (web/elastic/start.ts), the
 * default whenever the origin answers `/api/job`; `?mode=solo` trains in this tab alone.
 * Query parameters for tests and demos: `model=mlp|cnn|tiny-mlp`, `epochs`, `batch`, `subset` (first N
 * training images), `testSubset` (first N test images; 0 skips evaluation), `seed`, `lr`,
 * `optimizer=adamw|sgd`, `wd` (weight decay), `lossEvery`, `pause` (elastic: ms between steps, the GPU
 * limit's initial value), `debug=1` (exposes the worker to tests as `window.tabswarmWorker`).
 *
 * `window.tabswarm` is a read-only status (`TabStatus`) that tests await with `page.waitForFunction`.
 *
 * Before its first step the worker chooses the kernel variants for this adapter and the job's shapes
 * (kernels/tuning/): cached from an earlier visit, or timed now — the page then says "tuning for your
 * GPU…" — or the defaults (a software adapter, or a job that turns tuning off). The choice goes to the
 * coordinator in the hello, for the admin page. Solo runs tune as a job's default does (`tune: 'gpu'`).
 *
 * What runs where, and why a background tab keeps contributing:
 * - The training worker (a dedicated Web Worker) owns the GPU device, the model and the dataset; no
 *   page timer drives it.
 * - The main thread keeps what only it can have: the WebSocket to the coordinator and the WebRTC peer
 *   connections (RTCPeerConnection does not exist in workers, docs/chromium.md), and with them the elastic
 *   loop that sequences steps. That loop advances on events (worker replies, data-channel messages,
 *   coordinator messages), which hidden tabs deliver without delay; only its deadlines and the optional
 *   pause between steps are main-thread timers, which hidden tabs may round up to whole seconds.
 * - Heartbeats: the coordinator client sends them from a main-thread `setInterval(heartbeatMs)` and
 *   the coordinator drops a tab silent for 3 × heartbeatMs. Chrome runs a hidden tab's timers at most
 *   once a second, so that alone holds only while heartbeatMs ≥ 1000 (the default is 2000): a beat is
 *   then at most ~1 s late, well inside 3 × heartbeatMs. After 5 minutes hidden, Chrome runs chained
 *   timers once a minute unless the page uses WebRTC, which a tab waiting for a round does not. The page
 *   therefore also beats from a tiny worker's timer (heartbeat-ticker.ts), which those rules do not
 *   throttle, every heartbeatMs / 2. Step reports count as signs of life too.
 */
import * as Comlink from 'comlink';
import type { JobPublic, OptimizerSpec } from '../../core/training/job';
import { chunkedMetadata, datasetBuffers, fetchDataset, fetchDatasetMetadata } from '../worker/data/dataset-client';
import { elasticPatch, initialStatus, publicStatus, type TabStatus } from './status';
import { formatCount, isRunning, VolunteerView } from './view';
import type { TrainingWorkerApi } from '../worker/training-worker';
import type { KernelOptions, SoloOptions, SoloProgress } from '../worker/types';
import type { KernelsReport } from '../../core/protocol/tab-messages';
import { MAX_STEP_PAUSE_MS, type ElasticStatus } from '../elastic/elastic-loop';
import { startElastic, type ElasticHandle } from '../elastic/start';
import { appendBounded, LOSS_LOG_LENGTH } from '../elastic/status';
import './globals';
import '../shared.css';
import './volunteer.css';

const MODES = ['solo', 'elastic'] as const;
/** Where the GPU-use limit is remembered between visits. */
const PAUSE_STORAGE_KEY = 'tabswarm.stepPauseMs';

interface PageOptions {
  /** null: elastic when a coordinator serves this page, else solo. */
  mode: (typeof MODES)[number] | null;
  autostart: boolean;
  debug: boolean;
  /** Initial pause between steps (ms), from `?pause=` or the last visit. */
  stepPauseMs: number;
  solo: SoloOptions;
}

function storedPause(): number {
  try {
    const n = Number(localStorage.getItem(PAUSE_STORAGE_KEY) ?? 0);
    return Number.isFinite(n) ? Math.min(Math.max(0, n), MAX_STEP_PAUSE_MS) : 0;
  } catch {
    return 0;
  }
}

function parseOptions(query: URLSearchParams): PageOptions {
  const number = (name: string, fallback: number, check: (n: number) => boolean, what: string): number => {
    const raw = query.get(name);
    if (raw === null || raw === '') return fallback;
    const n = Number(raw);
    if (!Number.isFinite(n) || !check(n)) throw new Error(`?${name}=${raw} is not ${what}`);
    return n;
  };
  const positiveInt = (n: number) => Number.isInteger(n) && n >= 1;
  const mode = query.get('mode');
  if (mode !== null && !(MODES as readonly string[]).includes(mode))
    throw new Error(`?mode=${mode} is not available (modes: ${MODES.join(', ')})`);
  const lr = number('lr', 1e-3, (n) => n > 0 && n <= 10, 'a learning rate in (0, 10]');
  const weightDecay = number('wd', 0, (n) => n >= 0 && n <= 10, 'a weight decay in [0, 10]');
  const kind = query.get('optimizer') ?? 'adamw';
  let optimizer: OptimizerSpec;
  if (kind === 'adamw') optimizer = { kind, lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay };
  else if (kind === 'sgd')
    optimizer = { kind, lr, momentum: number('momentum', 0.9, (n) => n >= 0 && n < 1, 'a momentum in [0, 1)') };
  else throw new Error(`?optimizer=${kind} is not adamw or sgd`);
  const subset = query.get('subset') ? number('subset', 0, positiveInt, 'a positive integer') : undefined;
  const testSubset =
    query.get('testSubset') !== null
      ? number('testSubset', 0, (n) => Number.isInteger(n) && n >= 0, 'a non-negative integer')
      : undefined;
  return {
    mode: mode as PageOptions['mode'],
    autostart: query.get('autostart') === '1',
    debug: query.get('debug') === '1',
    stepPauseMs: number(
      'pause',
      storedPause(),
      (n) => n >= 0 && n <= MAX_STEP_PAUSE_MS,
      `a pause in [0, ${MAX_STEP_PAUSE_MS}] ms`,
    ),
    solo: {
      model: query.get('model') ?? 'mlp',
      optimizer,
      globalBatch: number('batch', 128, (n) => positiveInt(n) && n <= 8192, 'a batch size in [1, 8192]'),
      epochs: number('epochs', 1, (n) => positiveInt(n) && n <= 1000, 'an epoch count in [1, 1000]'),
      seed: number('seed', 1, (n) => Number.isInteger(n) && n >= 0 && n <= 0xffffffff, 'a 32-bit seed'),
      subset,
      testSubset,
      lossEvery: number('lossEvery', 10, positiveInt, 'a positive integer'),
    },
  };
}

const query = new URLSearchParams(location.search);
const status = initialStatus(query.get('model') ?? 'mlp');
Object.defineProperty(window, 'tabswarm', {
  get: () => publicStatus({ ...status, contributedMs: contributedMs() }),
  configurable: false,
});
const view = new VolunteerView();

function update(patch: Partial<TabStatus>): void {
  Object.assign(status, patch);
  status.contributedMs = contributedMs();
  view.render(status);
}

function fail(err: unknown, state: 'error' | 'unsupported' = 'error'): void {
  const message = err instanceof Error ? err.message : String(err);
  // No WebGPU is a fact about the browser, not a fault of the page.
  if (state === 'unsupported') console.warn(`tabswarm: ${message}`);
  else console.error(`tabswarm: ${message}`);
  update({ state, error: message });
}

let options: PageOptions;
try {
  options = parseOptions(query);
} catch (err) {
  fail(err);
  throw err;
}
status.stepPauseMs = options.stepPauseMs;
/** The job's heartbeat period (from `/api/job`), for the heartbeat ticker. */
let heartbeatMs = 2000;

const worker = new Worker(new URL('../worker/training-worker.ts', import.meta.url), {
  type: 'module',
  name: 'tabswarm-training',
});
worker.addEventListener('error', (e) =>
  fail(new Error(`training worker failed: ${e.message || 'could not start (module workers unsupported?)'}`)),
);
const api = Comlink.wrap<TrainingWorkerApi>(worker);
if (options.debug) window.tabswarmWorker = api;

// ------------------------------------------------------------------ time contributed

/** Time spent in the `training` phase, over every join of this page. */
let trainedMs = 0;
let trainingSince: number | null = null;

function contributedMs(): number {
  return trainedMs + (trainingSince === null ? 0 : performance.now() - trainingSince);
}

function trackTraining(training: boolean): void {
  const now = performance.now();
  if (trainingSince !== null) trainedMs += now - trainingSince;
  trainingSince = training ? now : null;
}

/** Re-render once a second while running, so the clock moves (display only: nothing trains on this timer). */
let clock: ReturnType<typeof setInterval> | null = null;
function runClock(on: boolean): void {
  if (on && clock === null) clock = setInterval(() => update({}), 1000);
  if (!on && clock !== null) {
    clearInterval(clock);
    clock = null;
  }
}

// ------------------------------------------------------------------ the job

/** The coordinator's job, when one serves this page (`GET /api/job`: a small JSON, fine before consent). */
async function fetchJob(): Promise<JobPublic | null> {
  try {
    const res = await fetch('/api/job', { cache: 'no-store' });
    if (!res.ok || !(res.headers.get('content-type') ?? '').includes('json')) return null;
    const body = (await res.json()) as { job?: JobPublic };
    return body.job ?? null;
  } catch {
    return null;
  }
}

/** How a dataset name reads in a sentence. */
const DATASET_NAMES: Readonly<Record<string, string>> = { 'fashion-mnist': 'Fashion-MNIST', mnist: 'MNIST' };

function describeJob(job: JobPublic): string {
  const epochs = `${job.epochs} epoch${job.epochs > 1 ? 's' : ''}`;
  return (
    `Train ${job.model.name} on ${formatCount(job.datasetSize)} ${DATASET_NAMES[job.dataset] ?? job.dataset} images: ${epochs} of ${job.stepsPerEpoch} steps, ` +
    `${formatCount(job.globalBatch)} samples per step shared among the tabs that take part.`
  );
}

function describeSolo(o: SoloOptions): string {
  const model = typeof o.model === 'string' ? o.model : o.model.name;
  return `Train ${model} in this tab alone: ${o.epochs} epoch${o.epochs > 1 ? 's' : ''}, batch ${o.globalBatch}${o.subset ? `, first ${o.subset} images` : ''}.`;
}

/** The coordinator's job as `/api/job` gave it (elastic), for choosing the kernels before joining. */
let publicJob: JobPublic | null = null;

/** Resolves to the mode once known: the query's, else elastic when a coordinator answers `/api/job`. */
const modeKnown: Promise<'solo' | 'elastic'> = (async () => {
  if (options.mode === 'solo') {
    view.setJob(describeSolo(options.solo));
    view.setSoloLede();
    return 'solo';
  }
  const job = await fetchJob();
  publicJob = job;
  if (job) {
    view.setJob(describeJob(job));
    heartbeatMs = job.heartbeatMs;
    return 'elastic';
  }
  if (options.mode === 'elastic') {
    view.setJob('No coordinator answers at this address: elastic training needs one.');
    return 'elastic';
  }
  view.setJob(describeSolo(options.solo));
  view.setSoloLede();
  return 'solo';
})();

// ------------------------------------------------------------------ kernels

/**
 * The worker's kernel choice for the model about to be built (state `tuning` while it times variants).
 * A failure is not the run's: the model is then built with the default kernels.
 */
async function chooseKernels(opts: KernelOptions): Promise<KernelsReport | undefined> {
  const before = status.state;
  try {
    const report = await api.chooseKernels(
      opts,
      Comlink.proxy(() => update({ state: 'tuning' })),
    );
    update({ kernels: report, state: before });
    return report;
  } catch (err) {
    console.warn(`tabswarm: choosing kernels failed, the defaults run: ${(err as Error).message}`);
    update({ state: before });
    return undefined;
  }
}

// ------------------------------------------------------------------ solo

function onProgress(p: SoloProgress): void {
  const patch: Partial<TabStatus> = { step: p.step, epoch: p.epoch, epochProgress: p.epochProgress };
  if (p.kind === 'step') {
    patch.state = 'training';
    if (p.lossAvg !== null) {
      patch.loss = p.lossAvg;
      appendBounded(status.losses, { step: p.step, loss: p.lossAvg }, LOSS_LOG_LENGTH);
    }
    if (p.samplesPerSec !== null) patch.samplesPerSec = p.samplesPerSec;
  } else {
    patch.accuracy = p.accuracy ?? null;
    patch.testLoss = p.testLoss ?? null;
  }
  update(patch);
}

async function trainSolo(): Promise<void> {
  update({
    mode: 'solo',
    state: 'loading-data',
    error: null,
    step: 0,
    epoch: 0,
    epochs: options.solo.epochs,
    epochProgress: 0,
    loss: null,
    losses: [],
    accuracy: null,
    testLoss: null,
    samplesPerSec: null,
    seconds: null,
  });
  const counts = await loadDataset();
  const o = options.solo;
  const trainCount = Math.min(o.subset ?? counts.train, counts.train);
  const maxBatch = Math.min(o.globalBatch, trainCount);
  await chooseKernels({ model: o.model, optimizer: o.optimizer, maxBatch, precision: 'f32', tune: 'gpu' });
  update({ state: 'building' });
  const result = await api.trainSolo(
    options.solo,
    Comlink.proxy((p: SoloProgress) => onProgress(p)),
  );
  update({
    state: result.stopped ? 'stopped' : 'done',
    step: result.steps,
    loss: result.lastLoss ?? status.loss,
    accuracy: result.accuracy ?? status.accuracy,
    testLoss: result.testLoss ?? status.testLoss,
    seconds: result.seconds,
    epochProgress: result.stopped ? status.epochProgress : 1,
  });
}

// ------------------------------------------------------------------ elastic

let datasetLoaded: Promise<{ train: number; test: number }> | null = null;

/**
 * Download the dataset (or take it from the browser cache) and hand it to the worker, once per page.
 * A user's text or tensors dataset is handed over as its metadata: the worker fetches the chunks its
 * steps need as it goes, and the progress counts what it has obtained of the whole. Resolves to the
 * numbers of training and test samples.
 */
function loadDataset(): Promise<{ train: number; test: number }> {
  datasetLoaded ??= (async () => {
    const raw = await fetchDatasetMetadata('');
    const chunked = chunkedMetadata(raw);
    if (chunked) {
      const totalBytes = Object.values(chunked.files).reduce((n, f) => n + f.bytes, 0);
      update({ dataset: { loadedBytes: 0, totalBytes, cachedBytes: 0, done: true } });
      const onChunks = (p: { loadedBytes: number; cachedBytes: number }) =>
        update({ dataset: { loadedBytes: p.loadedBytes, totalBytes, cachedBytes: p.cachedBytes, done: true } });
      return api.loadChunked(chunked, Comlink.proxy(onChunks));
    }
    const dataset = await fetchDataset('', (p) => update({ dataset: { ...p, done: false } }), raw);
    update({ dataset: { ...(status.dataset ?? { loadedBytes: 0, totalBytes: 0, cachedBytes: 0 }), done: true } });
    return api.loadData(Comlink.transfer(dataset, datasetBuffers(dataset)));
  })();
  datasetLoaded.catch(() => (datasetLoaded = null));
  return datasetLoaded;
}

/** What the elastic loop will build (web/elastic/held-states.ts `buildFresh`), so the choice applies to it. */
function kernelOptionsOf(job: JobPublic): KernelOptions {
  return {
    model: job.model,
    optimizer: job.optimizer,
    maxBatch: Math.min(job.globalBatch, job.datasetSize),
    precision: job.kernels.precision,
    tune: job.kernels.tune,
  };
}

let elastic: ElasticHandle | null = null;
/** Contribution of earlier joins of this page (each join is a new loop whose totals start at 0). */
const carried = { samplesProcessed: 0, samplesComputed: 0 };
let lastElastic: ElasticStatus | null = null;
/** Joins started by this page; each loop's reports are taken only while it is the latest. */
let joins = 0;
let ticker: Worker | null = null;

/** Extra heartbeats from a worker timer, which hidden tabs do not throttle (see the file comment). */
function startTicker(handle: ElasticHandle): void {
  stopTicker();
  try {
    ticker = new Worker(new URL('./heartbeat-ticker.ts', import.meta.url), {
      type: 'module',
      name: 'tabswarm-heartbeat',
    });
  } catch {
    return; // The client's own interval still beats.
  }
  ticker.onmessage = () => handle.heartbeat();
  ticker.postMessage({ periodMs: Math.max(250, heartbeatMs / 2) });
}

function stopTicker(): void {
  ticker?.terminate();
  ticker = null;
}

function onElasticStatus(s: ElasticStatus, evaluating: boolean): void {
  lastElastic = s;
  trackTraining(s.phase === 'training');
  const patch = elasticPatch(s, { evaluating, carried });
  update(patch);
  const running = isRunning(patch.state!);
  runClock(running);
  if (!running && patch.state !== 'evaluating') stopTicker();
}

async function trainElastic(): Promise<void> {
  if (lastElastic) {
    carried.samplesProcessed += lastElastic.samplesCommitted;
    carried.samplesComputed += lastElastic.samplesComputed;
    lastElastic = null;
  }
  leaveRequested = false;
  const join = ++joins;
  update({
    mode: 'elastic',
    state: 'loading-data',
    error: null,
    worldSize: 0,
    rank: null,
    share: null,
    waitReason: null,
    accuracy: null,
    testLoss: null,
  });
  runClock(true);
  const testCount = (await loadDataset()).test;
  const kernels = publicJob ? await chooseKernels(kernelOptionsOf(publicJob)) : undefined;
  if (leaveRequested) {
    // Left while the dataset was loading: never join.
    update({ state: 'left' });
    runClock(false);
    return;
  }
  update({ state: 'connecting' });
  const evaluateOnDone = options.solo.testSubset ?? testCount;
  const adapter = status.adapter!;
  elastic = await startElastic(
    {
      worker: api,
      adapter: { vendor: adapter.vendor, architecture: adapter.architecture, description: adapter.description },
      kernels,
      evaluateOnDone,
      stepPauseMs: status.stepPauseMs,
    },
    // A loop that was left may still report (its last restore unwinding): only the current join speaks.
    {
      onStatus: (s) => join === joins && onElasticStatus(s, evaluateOnDone > 0),
      onIceError: (message) => join === joins && update({ networkProblem: message }),
    },
  );
  startTicker(elastic);
  // Leave pressed while the dataset was loading: go at once (the goodbye reaches a coordinator that may have welcomed us).
  if (leaveRequested) leave();
}

// ------------------------------------------------------------------ controls

async function start(): Promise<void> {
  if ((await modeKnown) === 'elastic') await trainElastic();
  else await trainSolo();
}

/** Leave pressed before the join finished (handled when it does). */
let leaveRequested = false;

function leave(): void {
  leaveRequested = status.mode === 'elastic' && elastic === null;
  if (elastic) {
    elastic.leave();
    elastic = null;
    stopTicker();
  } else if (status.mode === 'solo') void api.stop();
}

view.start.addEventListener('click', () => void start().catch((err) => fail(err)));
view.stop.addEventListener('click', leave);
view.gpuLimit.addEventListener('input', () => {
  const ms = Math.min(Math.max(0, Number(view.gpuLimit.value) || 0), MAX_STEP_PAUSE_MS);
  elastic?.setStepPause(ms);
  try {
    localStorage.setItem(PAUSE_STORAGE_KEY, String(ms));
  } catch {
    // Storage disabled: the choice lasts for this visit only.
  }
  update({ stepPauseMs: ms });
});

async function probe(): Promise<void> {
  const [result, mode] = await Promise.all([api.probe(), modeKnown]);
  status.mode = mode;
  if (!result.ok) {
    fail(new Error(result.reason), 'unsupported');
    return;
  }
  update({ state: 'ready', adapter: result.adapter });
  if (options.autostart) await start();
}

view.render(status);
probe().catch((err) => fail(err));
