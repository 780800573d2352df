/**
 * What the f16 mode does to learning: the same run twice — float32 (the reference) and f16 (matmul
 * operands stored as halves; docs/gpu.md) — from the same seed, batches and order, in Node on our kernels
 * (Dawn; SwiftShader here, which needs no shader-f16 for it: halves are packed with core WGSL):
 * - `mlp` on Fashion-MNIST (data/fashion-mnist), AdamW lr 1e-3, batch 128, MLP_STEPS steps (default one
 *   epoch, 469), test loss and accuracy on the 10,000 test images every 100 steps and at the end;
 * - `gpt-tiny` on this repository's own prose (README.md and docs/*.md, the last 10 % held out), AdamW
 *   lr 3e-3 with 20 warm-up steps, batch GPT_BATCH (4) windows of 128 bytes, GPT_STEPS steps (200),
 *   held-out bits per byte every 25 steps.
 * Not part of `npm test`. Run: `npm run bench:precision` (env MLP_STEPS, GPT_STEPS, GPT_BATCH, PARTS=mlp,gpt).
 * Prints the curves and one JSON line `{"bench":"precision",…}`; results go to bench/RESULTS.md by hand.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { it } from 'vitest';
import { ImageBatches } from '../core/data/image-batches';
import { GPT_TINY_SPEC, MLP_SPEC, parameterLayout } from '../core/training/model-spec';
import { epochOrder } from '../core/training/sampler';
import { createModel } from '../kernels/model/model';
import type { Precision } from '../kernels/model/model-graph';
import { loadIdxDataset } from '../node/idx';
import { nodeGpu } from '../test/support/node-gpu';
import { mulberry32 } from '../test/support/rng';

const MLP_STEPS = Number(process.env.MLP_STEPS ?? 469);
const GPT_STEPS = Number(process.env.GPT_STEPS ?? 200);
const GPT_BATCH = Number(process.env.GPT_BATCH ?? 4);
const PARTS = new Set((process.env.PARTS ?? 'mlp,gpt').split(','));
const REPO = resolve(import.meta.dirname, '..');

interface Point {
  step: number;
  /** mlp: mean test loss (nats); gpt-tiny: held-out bits per byte. */
  loss: number;
  /** mlp only: test accuracy. */
  accuracy?: number;
}

async function mlpRun(precision: Precision): Promise<Point[]> {
  const gpu = await nodeGpu();
  const data = await loadIdxDataset(join(REPO, 'data/fashion-mnist'));
  const batch = 128;
  const model = createModel(gpu, MLP_SPEC, parameterLayout(MLP_SPEC), {
    maxBatch: batch,
    seed: 42,
    precision,
    optimizer: { kind: 'adamw', lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 },
  });
  const train = new ImageBatches(data.train, batch);
  const testBatches = new ImageBatches(data.test, data.test.count);
  const test = testBatches.gather(Uint32Array.from({ length: data.test.count }, (_, i) => i));
  const evaluate = async (step: number): Promise<Point> => {
    const r = await model.evaluate(test.x, test.labels, test.batch);
    return { step, loss: r.lossSum / r.count, accuracy: r.correct / r.count };
  };
  const curve = [await evaluate(0)];
  const order = epochOrder(42, 0, data.train.count);
  for (let step = 1; step <= MLP_STEPS; step++) {
    const start = ((step - 1) * batch) % (order.length - batch);
    const b = train.gather(order, start, batch);
    model.trainStep(b.x, b.labels, b.batch);
    if (step % 100 === 0 || step === MLP_STEPS) curve.push(await evaluate(step));
  }
  model.destroy();
  return curve;
}

/** README.md and docs/*.md in name order: a few hundred KB of this project's English. */
function corpus(): Uint8Array {
  const files = [
    'README.md',
    ...readdirSync(join(REPO, 'docs'))
      .filter((f) => f.endsWith('.md'))
      .sort()
      .map((f) => `docs/${f}`),
  ];
  return new Uint8Array(Buffer.concat(files.map((f) => readFileSync(join(REPO, f)))));
}

async function gptRun(precision: Precision): Promise<Point[]> {
  const gpu = await nodeGpu();
  const spec = GPT_TINY_SPEC;
  const text = corpus();
  const cut = Math.floor(text.length * 0.9);
  const [train, held] = [text.subarray(0, cut), text.subarray(cut)];
  const lr = 3e-3;
  const model = createModel(gpu, spec, parameterLayout(spec), {
    maxBatch: Math.max(GPT_BATCH, 16),
    seed: 42,
    precision,
    optimizer: { kind: 'adamw', lr, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0.1 },
  });
  const windows = (source: Uint8Array, starts: number[]) => {
    const out = new Uint8Array(starts.length * (spec.context + 1));
    for (const [i, s] of starts.entries()) out.set(source.subarray(s, s + spec.context + 1), i * (spec.context + 1));
    return out;
  };
  const evalStarts = Array.from({ length: 16 }, (_, i) => i * Math.floor((held.length - spec.context - 1) / 16));
  const evalWindows = windows(held, evalStarts);
  const bits = async (step: number): Promise<Point> => {
    const r = await model.evaluateTokens(evalWindows, evalStarts.length);
    return { step, loss: r.lossSum / r.count / Math.LN2 };
  };
  const rand = mulberry32(7);
  const curve = [await bits(0)];
  for (let step = 1; step <= GPT_STEPS; step++) {
    model.setLearningRate(lr * Math.min(1, step / 20));
    const starts = Array.from({ length: GPT_BATCH }, () => Math.floor(rand() * (train.length - spec.context - 1)));
    model.trainTokens(windows(train, starts), GPT_BATCH);
    if (step % 25 === 0 || step === GPT_STEPS) {
      curve.push(await bits(step));
      console.log(`gpt-tiny ${precision} step ${step}: ${curve.at(-1)!.loss.toFixed(3)} bits/byte`);
    }
  }
  model.destroy();
  return curve;
}

it('f16 against float32: mlp and gpt-tiny learning', { timeout: 4 * 3600_000 }, async () => {
  const t0 = performance.now();
  const result: Record<string, Record<Precision, Point[]>> = {};
  if (PARTS.has('mlp')) result.mlp = { f32: await mlpRun('f32'), f16: await mlpRun('f16') };
  if (PARTS.has('gpt')) result['gpt-tiny'] = { f32: await gptRun('f32'), f16: await gptRun('f16') };
  for (const [model, runs] of Object.entries(result)) {
    console.log(`${model}: step, f32, f16${model === 'mlp' ? ' (test loss, accuracy)' : ' (held-out bits per byte)'}`);
    runs.f32.forEach((p, i) => {
      const q = runs.f16[i];
      const acc = (x?: number) => (x === undefined ? '' : ` ${(100 * x).toFixed(2)}%`);
      console.log(
        `  ${String(p.step).padStart(5)}  ${p.loss.toFixed(4)}${acc(p.accuracy)}  ${q.loss.toFixed(4)}${acc(q.accuracy)}`,
      );
    });
  }
  const settings = { MLP_STEPS, GPT_STEPS, GPT_BATCH, seconds: Math.round((performance.now() - t0) / 1000) };
  console.log(JSON.stringify({ bench: 'precision', settings, ...result }));
});
