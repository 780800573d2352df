/**
 * gpt-tiny learning Debian's fortunes (the example job's corpus) on our kernels in Node (Dawn on
 * SwiftShader here), one process: held-out bits per byte over wall time, until 3.0 bits per byte or
 * the time budget. Not part of `npm test`. Run:
 *   npx vitest run --config bench/vitest.learning.config.ts       (MINUTES=25 BATCH=4 by default)
 * Prints the curve and one JSON line; results go to bench/RESULTS.md.
 */
import { it } from 'vitest';
import { GPT_TINY_SPEC, parameterLayout } from '../core/training/model-spec';
import { loadTextDataset } from '../coordinator/datasets/user-datasets';
import { createModel } from '../kernels/model/model';
import { nodeGpu } from '../test/support/node-gpu';
import { mulberry32 } from '../test/support/rng';

const MINUTES = Number(process.env.MINUTES ?? 25);
const BATCH = Number(process.env.BATCH ?? 4);
const TARGET_BITS = 3.0;

function windows(text: Uint8Array, starts: number[], context: number): Uint8Array {
  const out = new Uint8Array(starts.length * (context + 1));
  starts.forEach((s, i) => {
    out.set(text.subarray(s, s + context + 1), i * (context + 1));
  });
  return out;
}

it('gpt-tiny on fortunes', { timeout: (MINUTES + 5) * 60_000 }, async () => {
  const spec = GPT_TINY_SPEC;
  const data = await loadTextDataset({ path: '/usr/share/games/fortunes', skip: ['.dat'] }, spec.context);
  const counts = new Array(256).fill(0);
  for (const b of data.train) counts[b]++;
  const unigram = -counts.reduce((h, c) => (c ? h + (c / data.train.length) * Math.log2(c / data.train.length) : h), 0);
  const gpu = await nodeGpu();
  const lr = 3e-3;
  const model = createModel(gpu, spec, parameterLayout(spec), {
    maxBatch: BATCH,
    seed: 42,
    optimizer: { kind: 'adamw', lr, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0.1 },
  });
  const evalStarts = Array.from({ length: 16 }, (_, i) => i * Math.floor((data.test.length - spec.context - 1) / 16));
  const evalWindows = windows(data.test, evalStarts, spec.context);
  const bits = async () => {
    const r = await model.evaluateTokens(evalWindows, evalStarts.length);
    return r.lossSum / r.count / Math.LN2;
  };
  const rand = mulberry32(7);
  const curve: { step: number; seconds: number; bits: number }[] = [{ step: 0, seconds: 0, bits: await bits() }];
  const start = performance.now();
  let reached: number | null = null;
  for (let step = 1; ; step++) {
    model.setLearningRate(lr * Math.min(1, step / 20));
    const starts = Array.from({ length: BATCH }, () => Math.floor(rand() * (data.train.length - spec.context - 1)));
    model.trainTokens(windows(data.train, starts, spec.context), BATCH);
    if (step % 10 === 0) {
      // The evaluation reads back, so the clock includes every step submitted so far.
      const b = await bits();
      const seconds = (performance.now() - start) / 1000;
      curve.push({ step, seconds: Math.round(seconds), bits: Number(b.toFixed(3)) });
      console.log(`step ${step} ${seconds.toFixed(0)} s: ${b.toFixed(3)} bits/byte`);
      if (b <= TARGET_BITS && reached === null) reached = seconds;
      if (reached !== null || seconds > MINUTES * 60) break;
    }
  }
  model.destroy();
  const last = curve[curve.length - 1];
  console.log(
    JSON.stringify({
      bench: 'transformer_learning',
      model: spec.name,
      corpus: 'fortunes',
      trainBytes: data.train.length,
      unigramBits: Number(unigram.toFixed(3)),
      batch: BATCH,
      context: spec.context,
      steps: last.step,
      tokens: last.step * BATCH * spec.context,
      secondsTo3Bits: reached === null ? null : Math.round(reached),
      finalBits: last.bits,
      curve,
    }),
  );
});
