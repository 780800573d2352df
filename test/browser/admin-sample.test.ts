/**
 * The admin page of a language-model job, in headless Chromium (WebGPU on SwiftShader) against a real
 * coordinator process with one simulated worker (no GPU on its side): the held-out loss appears in bits
 * per byte once rank 0 reports evaluations, and the Sample button decodes 200 bytes from the latest
 * checkpoint on the admin tab's own GPU. At temperature 0 the bytes equal a greedy decode by the float64
 * reference (test/support/reference-transformer.ts, nothing shared with the kernels) of the same
 * checkpoint's parameters; at temperature 1 there are 200 of them, each in the vocabulary.
 *
 * The simulated checkpoint parameters are seeded uniform values with logits of order 1 (sim-trainer.ts),
 * and the test checks that the reference's best logit beats the second by far more than float32
 * rounding at every step, so the exact comparison is meaningful. Without WebGPU the card says so. About
 * 15 s on 2 shared cores.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parameterLayout, type TransformerSpec } from '../../core/training/model-spec';
import { launchChromium, skipWithoutChromium, skipWithoutWebBuild, watchPage, WEB_BUILD_DIR } from '../support/browser';
import { type CoordinatorProcess, REPO_ROOT, spawnCoordinator, TEST_ADMIN_TOKEN } from '../support/coordinator-process';
import { makeTempDir } from '../support/fake-dataset';
import { generatedText } from '../support/generated-text';
import { greedyDecodeRef } from '../support/reference-transformer';
import { SimTrainer, simulatedParams } from '../support/sim-trainer';

const MODEL: TransformerSpec = {
  type: 'transformer',
  name: 'gpt-sample',
  vocab: 256,
  context: 16,
  dModel: 32,
  heads: 2,
  layers: 2,
  mlpRatio: 4,
};
const PROMPT = 'The ';
/** Steps the simulated worker trains (two checkpoints and two evaluation points on the way). */
const STEPS = 20;

const skip = skipWithoutChromium() || skipWithoutWebBuild();

describe.skipIf(skip)('admin page of a language model', () => {
  let proc: CoordinatorProcess;
  let browser: Browser;
  let trainer: SimTrainer;

  beforeAll(async () => {
    const dir = makeTempDir('tabswarm-admin-sample-');
    writeFileSync(join(dir, 'train.txt'), generatedText(3, 16 * 64 + MODEL.context));
    writeFileSync(join(dir, 'test.txt'), generatedText(4, 256));
    const job = {
      model: MODEL,
      dataset: { kind: 'text', path: join(dir, 'train.txt'), testPath: join(dir, 'test.txt') },
      optimizer: { kind: 'adamw', lr: 0.01 },
      globalBatch: 16,
      epochs: 1,
      minWorkers: 1,
      commitEvery: 1,
      checkpointEvery: 10,
      evalEvery: 10,
      evalSamples: 16,
      heartbeatMs: 1000,
    };
    proc = await spawnCoordinator({ job, extraArgs: ['--dist', WEB_BUILD_DIR] });
    browser = await launchChromium();
    trainer = await SimTrainer.join(proc.wsUrl, { httpUrl: proc.url, stopAfterStep: STEPS });
  });

  afterAll(async () => {
    trainer?.stop();
    await trainer?.worker.close();
    await browser?.close();
    await proc?.stop();
  });

  it('plots bits per byte and samples 200 bytes on its own GPU, greedy at temperature 0', async () => {
    const began = performance.now();
    await trainer.untilCommitted(STEPS);
    // Rank 0 reports the held-out loss of steps 10 and 20: 3 and 2.5 bits per byte.
    const { round } = await proc.status();
    const w = trainer.worker;
    for (const [step, bits] of [
      [10, 3],
      [20, 2.5],
    ]) {
      const lossSum = 16 * bits * Math.LN2;
      w.send({
        type: 'evaluation',
        runId: w.runId,
        workerId: w.workerId,
        round,
        step,
        epoch: 0,
        testSamples: 16,
        correct: 5,
        lossSum,
      });
    }

    mkdirSync(join(REPO_ROOT, 'test-results'), { recursive: true });
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    const problems = watchPage(page);
    await page.goto(`${proc.url}/admin/?token=${TEST_ADMIN_TOKEN}`);
    await page.waitForSelector('#sample-card', { state: 'visible' });
    await page.waitForSelector('#bits-card', { state: 'visible' });
    await expect.poll(() => page.textContent('#bits-latest'), { timeout: 10_000 }).toBe('· 2.500 at step 20');
    expect(await page.isHidden('#bits-empty')).toBe(true);
    await page.waitForFunction(() => document.querySelectorAll('#checkpoints-body tr').length >= 2, undefined, {
      timeout: 20_000,
    });

    const sample = async (temperature: number) => {
      await page.fill('#sample-temperature', String(temperature));
      await page.fill('#sample-prompt', PROMPT);
      await page.click('#sample-button');
      await page.waitForSelector('#sample-output[data-state=done]', { timeout: 60_000 });
      const out = await page.$eval('#sample-output', (el) => ({
        tokens: (el as HTMLElement).dataset.tokens!.split(',').map(Number),
        step: Number((el as HTMLElement).dataset.step),
      }));
      // Ready for the next click: the state is set again when it starts.
      await page.$eval('#sample-output', (el) => delete (el as HTMLElement).dataset.state);
      return out;
    };

    const greedy = await sample(0);
    expect(greedy.step).toBe(STEPS);
    expect(greedy.tokens).toHaveLength(200);
    const params = simulatedParams(MODEL, greedy.step);
    const byName = new Map(parameterLayout(MODEL).entries.map((e) => [e.name, e]));
    const tensor = (name: string) => {
      const e = byName.get(name)!;
      return params.subarray(e.offset, e.offset + e.size);
    };
    const reference = greedyDecodeRef(MODEL, tensor, new TextEncoder().encode(PROMPT), 200);
    expect(reference.minMargin, 'the best logit stands clear of the second at every step').toBeGreaterThan(1e-3);
    expect(greedy.tokens).toEqual(reference.tokens);

    const drawn = await sample(1);
    expect(drawn.tokens).toHaveLength(200);
    expect(drawn.tokens.every((t) => Number.isInteger(t) && t >= 0 && t < MODEL.vocab)).toBe(true);
    expect(drawn.tokens, 'temperature 1 draws, it does not take the arg-max every time').not.toEqual(greedy.tokens);
    expect(await page.textContent('#sample-status')).toMatch(/^Step 20, temperature 1: 200 bytes in [\d.]+ s\.$/);
    console.log(
      `admin sample: greedy decode of ${new Set(greedy.tokens).size} distinct bytes, smallest reference margin ${reference.minMargin.toFixed(4)}; ` +
        `2 × 200 bytes decoded in the admin tab; ${((performance.now() - began) / 1000).toFixed(1)} s`,
    );
    await page.screenshot({ path: join(REPO_ROOT, 'test-results', 'admin-sample-1280x900.png'), fullPage: true });
    problems.assertNone();
  });

  it('says plainly that sampling needs WebGPU when the browser has none', async () => {
    const context = await browser.newContext();
    await context.addInitScript(() => Object.defineProperty(Navigator.prototype, 'gpu', { get: () => undefined }));
    const page = await context.newPage();
    await page.goto(`${proc.url}/admin/?token=${TEST_ADMIN_TOKEN}`);
    await page.waitForSelector('#sample-card', { state: 'visible' });
    await page.click('#sample-button');
    await page.waitForSelector('#sample-output[data-state=failed]', { state: 'attached', timeout: 20_000 });
    expect(await page.textContent('#sample-status')).toBe(
      'Cannot sample: this browser has no WebGPU, which sampling needs (it runs the model in this tab)',
    );
    expect(await page.isHidden('#sample-output')).toBe(true);
    await context.close();
  });
});
