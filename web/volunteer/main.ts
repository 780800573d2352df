/**
 * The volunteer page: checks WebGPU (in the worker that will own the device), waits for consent (the
 * Start button, or `?autostart=1`), downloads the dataset with progress, and trains.
 *
 * Modes: `?mode=elastic` joins the coordinator the page was served from (web/elastic/start.ts), the
 * default whenever the origin answers `/api/job`; `?mode=solo` trains in this tab alone.
 * Query parameters for tests and demos: `model=mlp|cnn|tiny-mlp`, `epochs`, `batch`, `subset` (first N
 * training images), `testSubset` (first N test images; 0 skips evaluation), `seed`, `lr`,
 * `optimizer=adamw|sgd`, `wd` (weight decay), `lossEvery`, `debug=1` (exposes the worker to tests as
 * `window.tabswarmWorker`).
 *
 * `window.tabswarm` is a read-only status (`TabStatus`) that tests await with `page.waitForFunction`.
 */
import * as Comlink from 'comlink';
import type { OptimizerSpec } from '../../coordinator/core/job';
import { datasetBuffers, fetchDataset } from './dataset-client';
import { initialStatus, publicStatus, type TabStatus } from './status';
import { VolunteerView } from './view';
import type { TrainingWorkerApi } from '../worker/training-worker';
import type { SoloOptions, SoloProgress } from '../worker/types';
import type { ElasticStatus } from '../elastic/elastic-loop';
import { startElastic, type ElasticHandle } from '../elastic/start';
import './globals';
import './volunteer.css';

const MODES = ['solo', 'elastic'] as const;

interface PageOptions {
  /** null: elastic when a coordinator serves this page, else solo. */
  mode: (typeof MODES)[number] | null;
  autostart: boolean;
  debug: boolean;
  solo: SoloOptions;
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
  if (mode !== null && !(MODES as readonly string[]).includes(mode)) throw new Error(`?mode=${mode} is not available (modes: ${MODES.join(', ')})`);
  const lr = number('lr', 1e-3, (n) => n > 0 && n <= 10, 'a learning rate in (0, 10]');
  const weightDecay = number('wd', 0, (n) => n >= 0 && n <= 10, 'a weight decay in [0, 10]');
  const kind = query.get('optimizer') ?? 'adamw';
  let optimizer: OptimizerSpec;
  if (kind === 'adamw') optimizer = { kind, lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay };
  else if (kind === 'sgd') optimizer = { kind, lr, momentum: number('momentum', 0.9, (n) => n >= 0 && n < 1, 'a momentum in [0, 1)') };
  else throw new Error(`?optimizer=${kind} is not adamw or sgd`);
  const subset = query.get('subset') ? number('subset', 0, positiveInt, 'a positive integer') : undefined;
  const testSubset = query.get('testSubset') !== null ? number('testSubset', 0, (n) => Number.isInteger(n) && n >= 0, 'a non-negative integer') : undefined;
  return {
    mode: mode as PageOptions['mode'],
    autostart: query.get('autostart') === '1',
    debug: query.get('debug') === '1',
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
Object.defineProperty(window, 'tabswarm', { get: () => publicStatus(status), configurable: false });
const view = new VolunteerView();

function update(patch: Partial<TabStatus>): void {
  Object.assign(status, patch);
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
view.setJob(
  `Job: ${typeof options.solo.model === 'string' ? options.solo.model : options.solo.model.name}, ` +
    `${options.solo.epochs} epoch${options.solo.epochs > 1 ? 's' : ''}, batch ${options.solo.globalBatch}` +
    `${options.solo.subset ? `, first ${options.solo.subset} images` : ''}, trained in this tab alone.`,
);

const worker = new Worker(new URL('../worker/training-worker.ts', import.meta.url), { type: 'module', name: 'tabswarm-training' });
worker.addEventListener('error', (e) => fail(new Error(`training worker failed: ${e.message || 'could not start (module workers unsupported?)'}`)));
const api = Comlink.wrap<TrainingWorkerApi>(worker);
if (options.debug) window.tabswarmWorker = api;

function onProgress(p: SoloProgress): void {
  const patch: Partial<TabStatus> = { step: p.step, epoch: p.epoch, epochProgress: p.epochProgress };
  if (p.kind === 'step') {
    patch.state = 'training';
    if (p.lossAvg !== null) {
      patch.loss = p.lossAvg;
      status.losses.push({ step: p.step, loss: p.lossAvg });
      if (status.losses.length > 2000) status.losses.splice(0, status.losses.length - 2000);
    }
    if (p.samplesPerSec !== null) patch.samplesPerSec = p.samplesPerSec;
  } else {
    patch.accuracy = p.accuracy ?? null;
    patch.testLoss = p.testLoss ?? null;
  }
  update(patch);
}

/** A coordinator serves this page when its origin answers `/api/job`. */
async function coordinatorPresent(): Promise<boolean> {
  try {
    const res = await fetch('/api/job', { cache: 'no-store' });
    return res.ok && (res.headers.get('content-type') ?? '').includes('json');
  } catch {
    return false;
  }
}

let elastic: ElasticHandle | null = null;

function elasticPatch(s: ElasticStatus, evaluating: boolean): Partial<TabStatus> {
  const state: TabStatus['state'] =
    s.phase === 'training' ? 'training'
    : s.phase === 'done' ? (evaluating && s.accuracy === null ? 'evaluating' : 'done')
    : s.phase === 'failed' ? 'error'
    : s.phase === 'stopped' ? 'stopped'
    : 'building';
  return {
    state,
    step: s.committedStep,
    epoch: s.epoch,
    epochs: s.epochs,
    epochProgress: s.epochProgress,
    loss: s.loss,
    losses: s.losses,
    accuracy: s.accuracy,
    testLoss: s.testLoss,
    samplesPerSec: s.samplesPerSec,
    error: s.error,
  };
}

/** Join the coordinator's job: the dataset first (the tab must be able to compute when admitted), then the loop. */
async function trainElastic(): Promise<void> {
  update({ mode: 'elastic', state: 'loading-data', error: null, step: 0, epoch: 0, epochProgress: 0, loss: null, losses: [], accuracy: null, testLoss: null, samplesPerSec: null, seconds: null });
  view.setJob('Job: set by the coordinator; this tab trains together with the other tabs that joined it.');
  const dataset = await fetchDataset('', (p) => update({ dataset: { ...p, done: false } }));
  update({ dataset: { ...(status.dataset ?? { loadedBytes: 0, totalBytes: 0, cachedBytes: 0 }), done: true }, state: 'building' });
  await api.loadData(Comlink.transfer(dataset, datasetBuffers(dataset)));
  const evaluateOnDone = options.solo.testSubset ?? dataset.test.count;
  const adapter = status.adapter!;
  elastic = await startElastic(
    { worker: api, adapter: { vendor: adapter.vendor, architecture: adapter.architecture, description: adapter.description }, evaluateOnDone },
    { onStatus: (s) => update(elasticPatch(s, evaluateOnDone > 0)) },
  );
}

async function train(): Promise<void> {
  if (options.mode === 'elastic' || (options.mode === null && (await coordinatorPresent()))) {
    await trainElastic();
    return;
  }
  update({ state: 'loading-data', error: null, step: 0, epoch: 0, epochs: options.solo.epochs, epochProgress: 0, loss: null, losses: [], accuracy: null, testLoss: null, samplesPerSec: null, seconds: null });
  const dataset = await fetchDataset('', (p) => update({ dataset: { ...p, done: false } }));
  update({ dataset: { ...(status.dataset ?? { loadedBytes: 0, totalBytes: 0, cachedBytes: 0 }), done: true }, state: 'building' });
  await api.loadData(Comlink.transfer(dataset, datasetBuffers(dataset)));
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

view.start.addEventListener('click', () => void train().catch((err) => fail(err)));
view.stop.addEventListener('click', () => (elastic ? elastic.leave() : void api.stop()));

async function probe(): Promise<void> {
  const result = await api.probe();
  if (!result.ok) {
    fail(new Error(result.reason), 'unsupported');
    return;
  }
  update({ state: 'ready', adapter: result.adapter });
  if (options.autostart) await train();
}

view.render(status);
probe().catch((err) => fail(err));
