/**
 * Tabs train the datasets a user brings, against a real coordinator process in real headless Chromium
 * (WebGPU on SwiftShader): the coordinator serves them in chunks and each tab's worker fetches only the
 * chunks its slices touch (docs/models-and-data.md).
 *
 * - text: a tiny transformer, two elastic tabs, a small generated corpus; the per-step loss falls well
 *   below the unigram entropy of the text (the best a model without context can do), every step of the
 *   epoch is committed once by both ranks with agreeing hashes, and the audit is clean.
 * - tensors: Fashion-MNIST images exported to `.safetensors`, and as x.npy and y.npy, as float32 (pixel/255, as a Python user
 *   would) train in one tab to exactly the per-step losses and parameter hashes of the same images
 *   through the built-in IDX loader. Both paths give the model the same float32 inputs: the IDX loader
 *   divides in float64 and stores float32, and rounding a float64 quotient to float32 gives the
 *   correctly rounded float32 quotient (53 ≥ 2·24 + 2 bits), i.e. what numpy's float32 division gives.
 * - elastic invariance for a transformer: three tabs, one closed, one joining, one crashed; the audit is
 *   clean, the crash is the only restart (no hash disagreement), and every step's loss equals the
 *   uninterrupted single tab's to 1e-3.
 *
 * Kept short for CI (about 110 s together on 2 shared cores with SwiftShader): the learning run is 160
 * steps of 16 windows of 16 bytes, the churn runs 64 steps each, the three tensors runs 8 steps of 64 images.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadIdxDataset } from '../../node/idx';
import type { StatusResponse } from '../../core/protocol/views';
import type {} from '../../web/volunteer/globals';
import {
  FASHION_MNIST_DIR,
  launchChromium,
  skipWithoutChromium,
  skipWithoutFashionMnist,
  skipWithoutWebBuild,
} from '../support/browser';
import { expectAdmittedFromPeers, expectCleanAudit } from '../support/clean-audit';
import { type CommitRow, commitRows } from '../support/commit-log';
import type { CoordinatorProcess } from '../support/coordinator-process';
import { makeTempDir } from '../support/fake-dataset';
import { generatedText, unigramBits } from '../support/generated-text';
import { npyFile } from '../support/npy-file';
import { safetensorsFile } from '../support/safetensors-file';
import { writeDatasetSlice } from '../support/small-dataset';
import { coordinatorStatusUntil } from '../support/swarm';
import { SwarmRuns } from '../support/swarm-runs';

const TEXT_CONTEXT = 16;

const skip = skipWithoutChromium() || skipWithoutFashionMnist() || skipWithoutWebBuild();

describe.skipIf(skip)('tabs train the datasets a user brings', () => {
  let browser: Browser;
  const runs = new SwarmRuns(() => browser);
  const start = (job: Record<string, unknown>, datasetDir: string | null) => runs.start({ job, datasetDir });

  beforeAll(async () => {
    browser = await launchChromium();
  });

  afterEach(() => runs.closeAll());

  afterAll(async () => {
    await browser?.close();
  });

  /** A text job for a 2-block transformer (context 16, d 32) over `windows` windows of generated text. */
  function textJob(windows: number, overrides: Record<string, unknown> = {}) {
    const dir = makeTempDir('tabswarm-text-');
    const train = generatedText(5, windows + TEXT_CONTEXT);
    writeFileSync(join(dir, 'train.txt'), train);
    writeFileSync(join(dir, 'test.txt'), generatedText(6, 1024 + 1));
    const job = {
      model: {
        type: 'transformer',
        name: 'gpt-ci',
        vocab: 256,
        context: TEXT_CONTEXT,
        dModel: 32,
        heads: 2,
        layers: 2,
      },
      dataset: { kind: 'text', path: join(dir, 'train.txt'), testPath: join(dir, 'test.txt') },
      optimizer: { kind: 'adamw', lr: 0.01, beta1: 0.9, beta2: 0.99, weightDecay: 0.01 },
      globalBatch: 16,
      epochs: 1,
      minWorkers: 1,
      maxWorkers: 4,
      commitEvery: 1,
      checkpointEvery: 1000,
      heartbeatMs: 1000,
      lastCallMs: 300,
      seed: 11,
      evalSamples: 64,
      ...overrides,
    };
    return { job, train };
  }

  it('two elastic tabs train a transformer on text to well below its unigram entropy', async () => {
    const began = performance.now();
    const windows = 2560;
    const steps = windows / 16; // 160
    const { job, train } = textJob(windows, { minWorkers: 2, maxWorkers: 2 });
    const { coordinator, swarm } = await start(job, null);
    const tabs = await swarm.openMany(2);
    const finals = await Promise.all(
      tabs.map((t) => swarm.waitFor(t, (s) => s.phase === 'done' && s.testLoss !== null, null, 240_000)),
    );
    const status: StatusResponse = await coordinator.status();
    expect(status.state).toBe('done');
    expect(status.restarts, 'no restart: no rank ever disagreed on a hash').toBe(0);
    await expectCleanAudit(coordinator, { committed: windows });

    // Every step committed once, by both ranks (a commit needs every rank's report with the same hash).
    const rows = await commitRows(coordinator);
    expect(rows.map((r) => r.step)).toEqual(Array.from({ length: steps }, (_, i) => i + 1));
    expect(rows.every((r) => r.world === 2)).toBe(true);
    expect(new Set(rows.map((r) => r.hash)).size).toBe(steps);

    // The loss is nats per byte; untrained about ln 256, then well below the text's unigram entropy.
    const unigram = unigramBits(train);
    const bits = rows.map((r) => r.loss / Math.LN2);
    const last = bits.slice(-5).reduce((a, b) => a + b, 0) / 5;
    const heldOut = finals[0].testLoss! / Math.LN2;
    console.log(
      `text, 2 tabs: unigram ${unigram.toFixed(2)} bits/byte; step loss ${bits[0].toFixed(2)} → ${last.toFixed(2)} bits/byte (mean of the last 5 steps); ` +
        `held-out ${heldOut.toFixed(2)} bits/byte, next-byte accuracy ${(finals[0].accuracy! * 100).toFixed(1)} %; ` +
        `${((performance.now() - began) / 1000).toFixed(1)} s`,
    );
    expect(bits[0]).toBeGreaterThan(Math.log2(256) - 1);
    expect(last).toBeLessThan(0.7 * unigram);
    expect(heldOut).toBeLessThan(0.7 * unigram);
    // Both ranks evaluate the same committed parameters.
    expect(finals[1].testLoss).toBe(finals[0].testLoss);

    // Each tab fetched only chunks (the corpus is one chunk) and kept them in Cache Storage for a reload.
    const cached = await tabs[0].page.evaluate(async () => {
      const cache = await caches.open('tabswarm-dataset-v1');
      return (await cache.keys()).map((r) => new URL(r.url).pathname);
    });
    expect(cached.sort()).toEqual(['/api/dataset/chunks/test/0', '/api/dataset/chunks/train/0']);
    expect(swarm.problems()).toEqual([]);
  });

  it("a transformer survives a closed tab, a newcomer and a crashed renderer, on a single tab's trajectory", async () => {
    const began = performance.now();
    const windows = 1024;
    const steps = windows / 16; // 64
    const statusUntil = async (c: CoordinatorProcess, check: (s: StatusResponse) => boolean, what: string) =>
      (await coordinatorStatusUntil(c, check, what, { timeoutMs: 120_000, pollMs: 200 })).status;

    // The reference: one tab alone.
    const alone = await start(textJob(windows).job, null);
    await alone.swarm.waitFor(await alone.swarm.open('alone'), (s) => s.phase === 'done', null, 180_000);
    const reference = new Map((await commitRows(alone.coordinator)).map((r) => [r.step, r.loss]));
    expect(reference.size).toBe(steps);
    const aloneSeconds = (performance.now() - began) / 1000;

    const { coordinator, swarm } = await start(textJob(windows).job, null);
    const [a, b, c] = await swarm.openMany(3);
    await statusUntil(coordinator, (s) => s.world.total === 3 && s.step >= 4, 'three tabs training');
    // Closed (pagehide → goodbye): the other two carry on.
    await swarm.close(a);
    const closedAt = (await coordinator.status()).step;
    await statusUntil(coordinator, (s) => s.world.total === 2 && s.step >= closedAt + 3, 'two tabs training on');
    // A newcomer is admitted at a step boundary with the state from a peer.
    const d = await swarm.open('newcomer');
    const admitted = await swarm.waitFor(d, (s) => s.phase === 'training' && s.worldSize === 3, null, 120_000);
    await expectAdmittedFromPeers(coordinator, admitted.workerId!);
    await swarm.waitFor(d, (s, n) => s.committedStep >= n, admitted.committedStep + 2, 120_000);
    // A renderer crashes: the survivors restore and go on.
    await swarm.crash(b);
    const crashedAt = (await coordinator.status()).step;
    await statusUntil(coordinator, (s) => s.world.total === 2 && s.step >= crashedAt + 2, 'survivors training');
    await Promise.all([c, d].map((t) => swarm.waitFor(t, (s) => s.phase === 'done', null, 180_000)));

    const status = await coordinator.status();
    expect(status.state).toBe('done');
    expect(status.restarts, 'the crash is the one restart: no hash ever disagreed').toBe(1);
    await expectCleanAudit(coordinator, { committed: windows });
    const rows = await commitRows(coordinator);
    expect(rows.map((r) => r.step)).toEqual(Array.from({ length: steps }, (_, i) => i + 1));
    expect(new Set(rows.map((r) => r.world)).size, 'the world size changed').toBeGreaterThan(1);
    let worst = 0;
    for (const row of rows) {
      const ref = reference.get(row.step)!;
      const relative = Math.abs(row.loss - ref) / ref;
      worst = Math.max(worst, relative);
      expect(relative, `loss of step ${row.step}: ${row.loss} vs ${ref} alone`).toBeLessThan(1e-3);
    }
    console.log(
      `transformer churn (3 tabs, close, join, crash): worst relative per-step loss difference to one tab ${worst.toExponential(2)}; ` +
        `${aloneSeconds.toFixed(1)} s alone, ${((performance.now() - began) / 1000 - aloneSeconds).toFixed(1)} s churned`,
    );
    expect(swarm.problems()).toEqual([]);
  });

  it('a tensors dataset exported from Fashion-MNIST (safetensors, and .npy) trains exactly as the IDX loader does', async () => {
    const trainCount = 512;
    const testCount = 200;
    const idxDir = await writeDatasetSlice(
      FASHION_MNIST_DIR,
      join(makeTempDir('tabswarm-tensors-'), 'fashion-mnist'),
      trainCount,
      testCount,
    );
    // The export a Python user would write: x = images.astype(float32) / 255, y = labels (uint8).
    const idx = await loadIdxDataset(idxDir);
    const tensorsDir = makeTempDir('tabswarm-tensors-');
    for (const [name, split] of [
      ['train', idx.train],
      ['test', idx.test],
    ] as const) {
      const x = new Uint8Array(Float32Array.from(split.images, (b) => Math.fround(b) / 255).buffer);
      writeFileSync(
        join(tensorsDir, `${name}.safetensors`),
        safetensorsFile({
          x: { dtype: 'F32', shape: [split.count, 28, 28], data: x },
          y: { dtype: 'U8', shape: [split.count], data: split.labels },
        }),
      );
      // The same arrays as np.save writes them: a folder of x.npy and y.npy.
      mkdirSync(join(tensorsDir, name));
      writeFileSync(join(tensorsDir, name, 'x.npy'), npyFile('<f4', [split.count, 28, 28], x));
      writeFileSync(join(tensorsDir, name, 'y.npy'), npyFile('|u1', [split.count], split.labels));
    }
    const job = {
      model: 'tiny-mlp',
      optimizer: { kind: 'adamw', lr: 0.003, weightDecay: 0 },
      globalBatch: 64,
      epochs: 1,
      minWorkers: 1,
      commitEvery: 1,
      checkpointEvery: 1000,
      heartbeatMs: 1000,
      lastCallMs: 300,
      seed: 7,
      evalSamples: testCount,
    };
    const runs: { rows: CommitRow[]; accuracy: number; testLoss: number; seconds: number }[] = [];
    for (const dataset of [
      undefined,
      {
        kind: 'tensors',
        path: join(tensorsDir, 'train.safetensors'),
        testPath: join(tensorsDir, 'test.safetensors'),
      },
      { kind: 'tensors', path: join(tensorsDir, 'train'), testPath: join(tensorsDir, 'test') },
    ]) {
      const began = performance.now();
      const { coordinator, swarm } = await start(dataset ? { ...job, dataset } : job, idxDir);
      const tab = await swarm.open();
      const done = await swarm.waitFor(tab, (s) => s.phase === 'done' && s.testLoss !== null, null, 180_000);
      await expectCleanAudit(coordinator, { committed: trainCount });
      if (dataset) {
        // The epoch touched every training row and the evaluation every test row: all chunks, once each.
        const loaded = await tab.page.evaluate(() => window.tabswarm.dataset);
        expect(loaded).toMatchObject({ loadedBytes: loaded!.totalBytes, cachedBytes: 0 });
        expect(loaded!.totalBytes).toBe((trainCount + testCount) * (784 + 1) * 4);
      }
      runs.push({
        rows: await commitRows(coordinator),
        accuracy: done.accuracy!,
        testLoss: done.testLoss!,
        seconds: (performance.now() - began) / 1000,
      });
      expect(swarm.problems()).toEqual([]);
    }
    const [images, tensors, npy] = runs;
    expect(images.rows.map((r) => r.step)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    let worst = 0;
    for (const run of [tensors, npy]) {
      expect(run.rows.map((r) => r.step)).toEqual(images.rows.map((r) => r.step));
      for (const [i, row] of run.rows.entries()) {
        const ref = images.rows[i];
        worst = Math.max(worst, Math.abs(row.loss - ref.loss));
        // The same float32 inputs: the same parameters, bit for bit, after every step.
        expect(row.hash, `step ${row.step}`).toBe(ref.hash);
      }
      expect(run.accuracy).toBe(images.accuracy);
      expect(run.testLoss).toBe(images.testLoss);
    }
    console.log(
      `safetensors and .npy vs IDX, 8 steps: loss ${images.rows[0].loss.toFixed(4)} → ${images.rows.at(-1)!.loss.toFixed(4)}, ` +
        `largest per-step loss difference ${worst}, accuracy ${tensors.accuracy}, ${npy.accuracy} vs ${images.accuracy}; ` +
        `${tensors.seconds.toFixed(1)} s, ${npy.seconds.toFixed(1)} s vs ${images.seconds.toFixed(1)} s`,
    );
    expect(worst).toBeLessThanOrEqual(1e-6);
    expect(images.rows.at(-1)!.loss).toBeLessThan(images.rows[0].loss);
  });
});
