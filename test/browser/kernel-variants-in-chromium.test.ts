/**
 * Every autotuner candidate in Chromium's own WebGPU (SwiftShader here), as the Node kernel tests do it
 * in Dawn: in a real page (test/browser/pages/kernel-harness.ts), one training step of a cnn, a small GPT
 * and mlp with each candidate of each op family must give the default kernels' bits, and the default's
 * gradients must match the float64 reference (the f16 mode's: of the half-rounded dense operands).
 * Subgroup candidates run where Chromium's adapter offers `subgroups`; the log lists what ran.
 */
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CNN_SPEC,
  MLP_SPEC,
  parameterLayout,
  type SequentialSpec,
  type TransformerSpec,
} from '../../core/training/model-spec';
import { initParams } from '../../kernels/model/layers';
import { launchChromium, skipWithoutChromium, watchPage, type PageProblems } from '../support/browser';
import { expectScalarClose, expectTensorsClose, referenceForwardBackward } from '../support/reference-model';
import type { Family } from '../../kernels/tuning/variants';
import { nearestHalf, reportVariants, SMALL_GPT } from '../support/variants';
import { startViteServer, type TestViteServer } from '../support/vite-server';
import type { KernelHarness, VariantStepsResult } from './pages/kernel-harness';

/** The harness page's seeded batch (kernel-harness.ts `stepBits`), rebuilt here for the reference. */
function seededBatch(spec: SequentialSpec, batch: number): { x: Float64Array; labels: number[] } {
  let state = 17;
  const next = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 4294967296;
  };
  const x = Float64Array.from({ length: batch * spec.input.reduce((a, b) => a * b, 1) }, () => Math.fround(next()));
  return { x, labels: Array.from({ length: batch }, () => Math.floor(next() * spec.classes)) };
}

describe.skipIf(skipWithoutChromium())('kernel variants in Chromium', () => {
  let vite: TestViteServer;
  let browser: Browser;
  let page: Page;
  let problems: PageProblems;

  const run = (spec: SequentialSpec | TransformerSpec, batch: number, precision: 'f32' | 'f16', families: Family[]) =>
    page.evaluate((args) => (window as unknown as { kernelHarness: KernelHarness }).kernelHarness.variantSteps(args), {
      spec,
      batch,
      precision,
      families,
    });

  const report = (label: string, r: VariantStepsResult) => {
    const missing = r.features.subgroups
      ? []
      : [{ name: 'matmul and LayerNorm subgroup variants', feature: 'subgroups' }];
    reportVariants(`Chromium ${label}`, r.ran, missing);
    expect(r.differing).toEqual([]);
  };

  beforeAll(async () => {
    vite = await startViteServer({ optimizeDeps: ['zod'], cacheDir: 'node_modules/.vite-kernel-harness' });
    browser = await launchChromium();
    page = await browser.newPage();
    problems = watchPage(page);
    await page.goto(`${vite.url}/test/browser/pages/kernel-harness.html`);
    await page.waitForFunction(() => (window as unknown as { kernelHarness?: KernelHarness }).kernelHarness);
  });

  afterAll(async () => {
    await browser?.close();
    await vite?.close();
  });

  it('gives the default kernels’ bits with every candidate (cnn, a small GPT), the default matching float64', async () => {
    const cnn = await run(CNN_SPEC, 2, 'f32', ['matmul', 'conv2d', 'optimizer']);
    report('cnn', cnn);
    const layout = parameterLayout(CNN_SPEC);
    const { x, labels } = seededBatch(CNN_SPEC, 2);
    const ref = referenceForwardBackward(CNN_SPEC, layout, initParams(CNN_SPEC, layout, 5), x, labels, 2);
    expectScalarClose(cnn.lossSum, ref.lossSum, 1e-4, 'cnn loss');
    expectTensorsClose(cnn.gradients, ref.grads, layout, { rtol: 1e-4, label: 'cnn gradients' });
    report('small GPT', await run(SMALL_GPT, 2, 'f32', ['matmul', 'attention', 'layernorm', 'optimizer']));
    problems.assertNone();
  });

  it('in the f16 mode too: mlp, every candidate with the default’s bits, the default matching the half-rounded float64 reference', async () => {
    const mlp = await run(MLP_SPEC, 4, 'f16', ['matmul', 'optimizer']);
    report('mlp f16', mlp);
    const layout = parameterLayout(MLP_SPEC);
    const { x, labels } = seededBatch(MLP_SPEC, 4);
    const init = initParams(MLP_SPEC, layout, 5);
    const ref = referenceForwardBackward(MLP_SPEC, layout, init, x, labels, 4, { roundDenseOperands: nearestHalf });
    expectScalarClose(mlp.lossSum, ref.lossSum, 1e-4, 'mlp f16 loss');
    expectTensorsClose(mlp.gradients, ref.grads, layout, { rtol: 1e-4, label: 'mlp f16 gradients' });
    problems.assertNone();
  });
});
