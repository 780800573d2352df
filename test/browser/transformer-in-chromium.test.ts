/**
 * The transformer kernels in Chromium's WebGPU (SwiftShader here), in a real page: one step of a
 * 2-block transformer — the initial parameters equal Node's bytes, and the loss and every gradient agree
 * with the TensorFlow.js CPU reference (test/support/reference-transformer-tfjs.ts) within 1e-4, and a
 * repeated step gives the same bits. 25–40 s here (pipeline compilation dominates).
 */
import * as tf from '@tensorflow/tfjs';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parameterLayout, type TransformerSpec } from '../../core/training/model-spec';
import { initParams } from '../../kernels/model/layers';
import { launchChromium, skipWithoutChromium, watchPage, type PageProblems } from '../support/browser';
import { expectScalarClose, expectTensorsClose } from '../support/reference-model';
import { tfTransformerStep } from '../support/reference-transformer-tfjs';
import { mulberry32 } from '../support/rng';
import { startViteServer, type TestViteServer } from '../support/vite-server';
import type { KernelHarness } from './pages/kernel-harness';

const SPEC: TransformerSpec = {
  type: 'transformer',
  name: 'gpt-chromium',
  vocab: 256,
  context: 20,
  dModel: 24,
  heads: 3,
  layers: 2,
  mlpRatio: 4,
};
const BATCH = 2;

describe.skipIf(skipWithoutChromium())('transformer kernels in Chromium', () => {
  let vite: TestViteServer;
  let browser: Browser;
  let page: Page;
  let problems: PageProblems;

  beforeAll(async () => {
    vite = await startViteServer({ optimizeDeps: ['zod'], cacheDir: 'node_modules/.vite-kernel-harness' });
    browser = await launchChromium();
    page = await browser.newPage();
    problems = watchPage(page);
    await page.goto(`${vite.url}/test/browser/pages/kernel-harness.html`);
    await page.waitForFunction(() => (window as unknown as { kernelHarness?: KernelHarness }).kernelHarness);
    await tf.setBackend('cpu');
  });

  afterAll(async () => {
    await browser?.close();
    await vite?.close();
  });

  it('agrees with Node on the initial bytes and with TF.js on the loss and every gradient', async () => {
    const rand = mulberry32(77);
    const windows = Array.from({ length: BATCH * (SPEC.context + 1) }, () => Math.floor(rand() * SPEC.vocab));
    const got = await page.evaluate(
      (args) => (window as unknown as { kernelHarness: KernelHarness }).kernelHarness.transformerStep(args),
      { spec: SPEC, seed: 5, windows, batch: BATCH },
    );
    problems.assertNone();
    const layout = parameterLayout(SPEC);
    const init = initParams(SPEC, layout, 5);
    expect(Float32Array.from(got.params)).toEqual(init);
    const ref = await tfTransformerStep(SPEC, layout, init, Uint32Array.from(windows), BATCH);
    expectScalarClose(got.lossSum, ref.loss, 1e-4, 'loss in Chromium vs TF.js');
    expectTensorsClose(got.gradients, ref.grads, layout, { rtol: 1e-4, label: 'gradients in Chromium vs TF.js' });
    expect(got.repeatIdentical).toBe(true);
    console.log(`transformer step in Chromium (${got.adapter}): loss ${got.lossSum} vs TF.js ${ref.loss}`);
  });
});
