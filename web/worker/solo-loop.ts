/**
 * The single-tab training loop. Each epoch walks `epochOrder(seed, epoch, n)` — the same order the
 * coordinator's sampler record uses — `globalBatch` positions per step (the last step short). It has no
 * coordinator and no sample record, so no holes: its layout is the group plan's without them
 * (core/training/groups.ts).
 *
 * Steps are submitted without reading anything back; the loss is read every `lossEvery` steps and at
 * each epoch's end. To keep the queue (and the uploaded batches it holds) bounded, the loop waits for
 * the GPU to finish step k−MAX_IN_FLIGHT before submitting more: `onSubmittedWorkDone` is a fence, not
 * a read-back.
 */
import { epochOrder } from '../../core/training/sampler';
import type { Model } from '../../kernels/model/model';
import type { BatchSource, TestSet } from './data/batches';
import type { SoloOptions, SoloProgress, SoloResult } from './types';

/** Steps the CPU may run ahead of the GPU. */
const MAX_IN_FLIGHT = 2;

export interface SoloRun {
  model: Model;
  train: BatchSource;
  /** Train on samples 0..trainCount-1. */
  trainCount: number;
  test?: TestSet;
  options: SoloOptions;
  shouldStop(): boolean;
  onProgress(p: SoloProgress): void;
}

export async function runSolo(run: SoloRun): Promise<SoloResult> {
  const { model, trainCount: n, options } = run;
  const batchSize = Math.min(options.globalBatch, model.maxBatch);
  const lossEvery = Math.max(1, options.lossEvery ?? 10);
  const stepsPerEpoch = Math.ceil(n / batchSize);
  const queue = model.gpu.device.queue;
  const began = performance.now();
  let step = 0;
  let lastLoss: number | null = null;
  let accuracy: number | null = null;
  let testLoss: number | null = null;
  let stopped = false;
  const throughput = new ThroughputWindow();
  const inFlight: Promise<undefined>[] = [];

  for (let epoch = 0; epoch < options.epochs && !stopped; epoch++) {
    const order = epochOrder(options.seed, epoch, n);
    for (let s = 0; s < stepsPerEpoch; s++) {
      if (run.shouldStop()) {
        stopped = true;
        break;
      }
      const cursor = s * batchSize;
      const count = Math.min(batchSize, n - cursor);
      await submitStep(run, order, cursor, count);
      step++;
      throughput.add(count);
      inFlight.push(queue.onSubmittedWorkDone());
      if (inFlight.length > MAX_IN_FLIGHT) await inFlight.shift();
      const lastOfEpoch = s === stepsPerEpoch - 1;
      if (step % lossEvery === 0 || lastOfEpoch) {
        lastLoss = await readLoss(run, { step, epoch, epochProgress: (cursor + count) / n }, count, throughput);
        inFlight.length = 0;
      }
    }
    if (run.test && !stopped) {
      ({ accuracy, testLoss } = await evaluateEpoch(run, run.test, step, epoch, lastLoss));
      // Evaluation time is not training time.
      throughput.restart();
    }
  }
  await Promise.all(inFlight);
  return {
    steps: step,
    epochs: options.epochs,
    stopped,
    lastLoss,
    accuracy,
    testLoss,
    seconds: (performance.now() - began) / 1000,
  };
}

/** Submits one training step on `count` samples of `order` from `cursor` (its batch uploaded first). */
async function submitStep(run: SoloRun, order: Uint32Array, cursor: number, count: number): Promise<void> {
  const ready = run.train.prepare(order, cursor, count);
  if (ready) await ready;
  const { x, labels } = run.train.gather(order, cursor, count);
  run.model.trainStep(x, labels, count);
}

/**
 * The loss of the step just submitted, reported with the throughput since the last read. The loss buffer
 * holds the sum over the most recent batch; reading it waits for the queue.
 */
async function readLoss(
  run: SoloRun,
  at: { step: number; epoch: number; epochProgress: number },
  count: number,
  throughput: ThroughputWindow,
): Promise<number> {
  const loss = (await run.model.readLossSum()) / count;
  const samplesPerSec = throughput.take();
  if (!Number.isFinite(loss)) throw new Error(`training diverged: loss ${loss} at step ${at.step}`);
  run.onProgress({ kind: 'step', ...at, lossAvg: loss, samplesPerSec });
  return loss;
}

/** Throughput window: samples submitted since the last loss read, and when it started. */
class ThroughputWindow {
  private samples = 0;
  private start = performance.now();

  add(count: number): void {
    this.samples += count;
  }

  /** Samples per second over the window, then start a new one. */
  take(): number {
    const now = performance.now();
    const samplesPerSec = (this.samples * 1000) / Math.max(1, now - this.start);
    this.samples = 0;
    this.start = now;
    return samplesPerSec;
  }

  restart(): void {
    this.start = performance.now();
    this.samples = 0;
  }
}

/** Evaluate on the test set after `epoch` and report it; returns the accuracy and mean test loss. */
async function evaluateEpoch(
  run: SoloRun,
  test: NonNullable<SoloRun['test']>,
  step: number,
  epoch: number,
  lastLoss: number | null,
): Promise<{ accuracy: number; testLoss: number }> {
  const r = await run.model.evaluate(test.x, test.labels, test.count);
  const accuracy = r.correct / (r.count * test.positions);
  const testLoss = r.lossSum / r.count;
  run.onProgress({
    kind: 'evaluation',
    step,
    epoch,
    epochProgress: 1,
    lossAvg: lastLoss,
    samplesPerSec: null,
    accuracy,
    testLoss,
    testCount: r.count,
  });
  return { accuracy, testLoss };
}
