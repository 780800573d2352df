/**
 * The single-tab training loop. Each epoch walks `epochOrder(seed, epoch, n)` — the same order the
 * coordinator's sampler record uses — `globalBatch` positions per step (the last step short).
 *
 * Steps are submitted without reading anything back; the loss is read every `lossEvery` steps and at
 * each epoch's end. To keep the queue (and the uploaded batches it holds) bounded, the loop waits for
 * the GPU to finish step k−MAX_IN_FLIGHT before submitting more: `onSubmittedWorkDone` is a fence, not
 * a read-back.
 */
import { epochOrder } from '../../coordinator/core/sampler';
import type { Model } from '../../kernels/model';
import type { BatchAssembler } from './batches';
import type { SoloOptions, SoloProgress, SoloResult } from './types';

/** Steps the CPU may run ahead of the GPU. */
const MAX_IN_FLIGHT = 2;

export interface SoloRun {
  model: Model;
  train: BatchAssembler;
  /** Train on samples 0..trainCount-1. */
  trainCount: number;
  test?: { x: Float32Array; labels: Uint32Array; count: number };
  options: SoloOptions;
  shouldStop(): boolean;
  onProgress(p: SoloProgress): void;
}

export async function runSolo(run: SoloRun): Promise<SoloResult> {
  const { model, train, trainCount: n, options } = run;
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
  // Throughput window: samples submitted since the last loss read, and when it started.
  let windowSamples = 0;
  let windowStart = performance.now();
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
      const { x, labels } = train.gather(order, cursor, count);
      model.trainStep(x, labels, count);
      step++;
      windowSamples += count;
      inFlight.push(queue.onSubmittedWorkDone());
      if (inFlight.length > MAX_IN_FLIGHT) await inFlight.shift();
      const lastOfEpoch = s === stepsPerEpoch - 1;
      if (step % lossEvery === 0 || lastOfEpoch) {
        // The loss buffer holds the sum over the most recent batch; reading it waits for the queue.
        lastLoss = (await model.readLossSum()) / count;
        inFlight.length = 0;
        const now = performance.now();
        const samplesPerSec = (windowSamples * 1000) / Math.max(1, now - windowStart);
        windowSamples = 0;
        windowStart = now;
        if (!Number.isFinite(lastLoss)) throw new Error(`training diverged: loss ${lastLoss} at step ${step}`);
        run.onProgress({
          kind: 'step',
          step,
          epoch,
          epochProgress: (cursor + count) / n,
          lossAvg: lastLoss,
          samplesPerSec,
        });
      }
    }
    if (run.test && !stopped) {
      const r = await model.evaluate(run.test.x, run.test.labels, run.test.count);
      accuracy = r.correct / r.count;
      testLoss = r.lossSum / r.count;
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
      // Evaluation time is not training time.
      windowStart = performance.now();
      windowSamples = 0;
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
