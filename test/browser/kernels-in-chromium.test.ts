/**
 * The kernels that pass in Node (Dawn) also work in Chromium's WebGPU, inside the training Web Worker
 * the volunteer page starts: one training step on a seeded batch — initial parameters, loss,
 * every gradient, and the AdamW update — against the float64 reference (test/support/reference-model.ts),
 * which shares no code with the WGSL.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { trainingStateHash } from '../../core/state/hash';
import { parameterLayout, resolveModelSpec, type SequentialSpec } from '../../core/training/model-spec';
import { epochOrder } from '../../core/training/sampler';
import { initParams } from '../../kernels/model/layers';
import {
  launchChromium,
  skipWithoutChromium,
  skipWithoutWebBuild,
  watchPage,
  type PageProblems,
} from '../support/browser';
import {
  expectScalarClose,
  expectTensorsClose,
  referenceAdamW,
  referenceForwardBackward,
} from '../support/reference-model';
import { mulberry32 } from '../support/rng';
import { startWebServer, type WebServer } from '../support/web-server';
import type {} from '../../web/volunteer/globals';

const ADAMW = { kind: 'adamw', lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 } as const;
const ROWS = 28;
const TRAIN = 24;
const TEST = 8;

/** A seeded synthetic dataset (random pixel bytes and labels), so the batch is known exactly in Node. */
function syntheticDataset(seed: number) {
  const rand = mulberry32(seed);
  const bytes = (n: number, max: number) => Array.from({ length: n }, () => Math.floor(rand() * max));
  return {
    name: 'synthetic',
    classes: 10,
    train: { images: bytes(TRAIN * ROWS * ROWS, 256), labels: bytes(TRAIN, 10), count: TRAIN, rows: ROWS, cols: ROWS },
    test: { images: bytes(TEST * ROWS * ROWS, 256), labels: bytes(TEST, 10), count: TEST, rows: ROWS, cols: ROWS },
  };
}
type Synthetic = ReturnType<typeof syntheticDataset>;

interface StepInPage {
  hash: string;
  params: number[];
  gradients: number[];
  lossSum: number;
  samples: number;
  after: number[];
}

/** In the page: load the data into the worker, build the model, run one step through the worker API. */
async function stepInPage(
  page: Page,
  args: { data: Synthetic; model: string; seed: number; indices: number[] },
): Promise<StepInPage> {
  return page.evaluate(
    async ({ data, model, seed, indices, optimizer }) => {
      const worker = window.tabswarmWorker;
      if (!worker) throw new Error('the page did not expose tabswarmWorker (?debug=1)');
      const split = (s: typeof data.train) => ({
        ...s,
        images: Uint8Array.from(s.images),
        labels: Uint8Array.from(s.labels),
      });
      await worker.loadData({
        name: data.name,
        classes: data.classes,
        train: split(data.train),
        test: split(data.test),
      });
      await worker.buildModel({ model, optimizer, maxBatch: indices.length, seed });
      const hash = await worker.hash();
      const params = Array.from(new Float32Array(await worker.parameters()));
      const g = await worker.computeGradients(Uint32Array.from(indices));
      const gradients = Array.from(new Float32Array(g.gradients!));
      await worker.applyGradients(g.gradients!.slice(0), g.samples);
      const after = Array.from(new Float32Array(await worker.parameters()));
      return { hash, params, gradients, lossSum: g.lossSum, samples: g.samples, after };
    },
    { ...args, optimizer: ADAMW },
  );
}

describe.skipIf(skipWithoutChromium() || skipWithoutWebBuild())(
  'the kernels in Chromium (training worker on WebGPU)',
  () => {
    let server: WebServer;
    let browser: Browser;
    let page: Page;
    let problems: PageProblems;

    beforeAll(async () => {
      server = await startWebServer();
      browser = await launchChromium();
      page = await browser.newPage();
      problems = watchPage(page);
      await page.goto(`${server.url}/?mode=solo&debug=1`);
      await page.waitForFunction(() => window.tabswarm.state !== 'checking');
      const status = await page.evaluate(() => window.tabswarm);
      expect(status.error, 'WebGPU in headless Chromium').toBeNull();
      expect(status.state).toBe('ready');
    });

    afterAll(async () => {
      await browser?.close();
      await server?.close();
    });

    for (const { model, batch, seed } of [
      { model: 'mlp', batch: 7, seed: 1 },
      { model: 'cnn', batch: 3, seed: 5 },
    ]) {
      it(`computes the ${model} loss, every gradient and the AdamW step like the float64 reference (batch ${batch})`, async () => {
        const data = syntheticDataset(seed + 100);
        const spec = resolveModelSpec(model) as SequentialSpec;
        const layout = parameterLayout(spec);
        // Distinct indices in a scrambled order: the gather must follow them, not the storage order.
        const indices = Array.from(epochOrder(seed, 0, TRAIN).subarray(0, batch));
        const got = await stepInPage(page, { data, model, seed, indices });

        // Initialisation is the same bytes in the browser as in Node (its state: zero AdamW moments, t = 0).
        const init = initParams(spec, layout, seed);
        const fresh = () => new Float32Array(init.length);
        expect(got.hash).toBe(trainingStateHash(init, [fresh(), fresh()], 0));
        expect(Float32Array.from(got.params)).toEqual(init);

        const pixels = ROWS * ROWS;
        const x = new Float64Array(batch * pixels);
        indices.forEach((index, b) => {
          for (let i = 0; i < pixels; i++) x[b * pixels + i] = data.train.images[index * pixels + i] / 255;
        });
        const labels = indices.map((i) => data.train.labels[i]);
        const ref = referenceForwardBackward(spec, layout, init, x, labels, batch);
        expect(got.samples).toBe(batch);
        expectScalarClose(got.lossSum, ref.lossSum, 1e-4, `${model} loss sum`);
        expectTensorsClose(got.gradients, ref.grads, layout, { rtol: 1e-4, label: `${model} gradient sums` });

        // The optimizer step from the GPU's own gradients, so this checks the update alone.
        const zeros = new Float64Array(layout.totalElements);
        const step = referenceAdamW(init, got.gradients, zeros, zeros, { ...ADAMW, gradScale: 1 / batch, t: 1 });
        expectTensorsClose(got.after, step.params, layout, {
          rtol: 1e-5,
          label: `${model} parameters after one AdamW step`,
        });
        problems.assertNone();
      });
    }
  },
);
