/**
 * Checked contributions with real tabs (docs/threat-model.md): headless Chromium tabs report sketches of
 * their own gradient sums, of the all-reduced sums and of the parameters with every step; the
 * coordinator checks agreement and the ring identity at every commit and has chosen steps recomputed by
 * its verifier process (Node, the same WGSL kernels). Honest tabs must pass every check with a wide
 * margin — the measured margin is what the tolerance rests on.
 *
 * Small on purpose: `tiny-mlp`, global batch 48, the first 1,536 Fashion-MNIST images (32 steps per
 * epoch), 500 test images.
 */
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { identityTolerance, RECOMPUTE_TOLERANCE } from '../../core/state/sketch';
import {
  FASHION_MNIST_DIR,
  launchChromium,
  skipWithoutChromium,
  skipWithoutFashionMnist,
  skipWithoutWebBuild,
} from '../support/browser';
import { expectCleanAudit } from '../support/clean-audit';
import { CoordinatorProcess } from '../support/coordinator-process';
import { makeTempDir } from '../support/fake-dataset';
import { writeDatasetSlice } from '../support/small-dataset';
import { coordinatorStatusUntil } from '../support/swarm';
import { SwarmRuns } from '../support/swarm-runs';

const TRAIN_IMAGES = 1536;
const TEST_IMAGES = 500;
const GLOBAL_BATCH = 48;
const STEPS = TRAIN_IMAGES / GLOBAL_BATCH; // 32

const job = {
  model: 'tiny-mlp',
  optimizer: { kind: 'adamw', lr: 0.003, weightDecay: 0 },
  globalBatch: GLOBAL_BATCH,
  epochs: 1,
  minWorkers: 3,
  maxWorkers: 4,
  checkpointEvery: 8,
  heartbeatMs: 1000,
  lastCallMs: 300,
  seed: 11,
  evalSamples: TEST_IMAGES,
};

const skip = skipWithoutChromium() || skipWithoutFashionMnist() || skipWithoutWebBuild();

describe.skipIf(skip)('checked contributions across browser tabs', () => {
  let browser: Browser;
  let datasetDir: string;
  const runs = new SwarmRuns(() => browser, { query: { testSubset: String(TEST_IMAGES) } });
  const start = (overrides: Record<string, unknown>) => runs.start({ job: { ...job, ...overrides }, datasetDir });

  beforeAll(async () => {
    datasetDir = await writeDatasetSlice(
      FASHION_MNIST_DIR,
      join(makeTempDir('tabswarm-verify-'), 'fashion-mnist'),
      TRAIN_IMAGES,
      TEST_IMAGES,
    );
    browser = await launchChromium();
  });

  afterEach(() => runs.closeAll());

  afterAll(async () => {
    await browser?.close();
  });

  it('three honest tabs: every step passes the ring identity, and the job completes', async () => {
    const { coordinator, swarm } = await start({ verify: { probability: 0 } });
    await swarm.openMany(3);
    await coordinatorStatusUntil(coordinator, (s) => s.status === 'done', 'the job done', {
      timeoutMs: 240_000,
      pollMs: 250,
    });
    const events = await coordinator.events();
    expect(events.filter((e) => e.event === 'ring_identity_failed')).toEqual([]);
    expect(events.filter((e) => e.event === 'divergence')).toEqual([]);
    expect(events.some((e) => e.event === 'cheater_banned')).toBe(false);
    await expectCleanAudit(coordinator, { committed: TRAIN_IMAGES });
    const status = await coordinator.status();
    expect(status.step).toBe(STEPS);
    // The margin the tolerance rests on: the worst honest commit used a small part of it.
    const metrics = await coordinator.metrics();
    const worst = CoordinatorProcess.metricValue(metrics, 'tabswarm_ring_identity_ratio{quantile="0.99"}');
    expect(CoordinatorProcess.metricValue(metrics, 'tabswarm_ring_identity_ratio_count')).toBe(STEPS);
    console.log(
      `ring identity, honest tabs: worst bucket ${worst.toExponential(2)} of the tolerance ${identityTolerance(3, 'none').toExponential(2)}`,
    );
    expect(worst).toBeLessThan(0.25);
  });

  it('three honest tabs with recomputed spot checks (p = 0.5): every check passes, by orders of magnitude', async () => {
    const { coordinator, swarm } = await start({ verify: { probability: 0.5 } });
    await swarm.openMany(3);
    await coordinatorStatusUntil(coordinator, (s) => s.status === 'done', 'the job done', {
      timeoutMs: 240_000,
      pollMs: 250,
    });
    const events = await coordinator.events();
    const done = events.filter((e) => e.event === 'verification_done');
    // 32 steps at p = 0.5 with one check (a few steps long) in flight at a time: about ten; fewer than two
    // is as unlikely as 1e-3 (0 would mean the checks never ran).
    expect(done.length).toBeGreaterThanOrEqual(2);
    expect(events.filter((e) => e.event === 'cheater_banned')).toEqual([]);
    for (const d of done) expect(d.data.cheaters).toEqual([]);
    const own = done.flatMap((d) => d.data.ownRatios as number[]);
    const params = done.map((d) => d.data.paramsRatio as number);
    const worst = Math.max(...own, ...params);
    console.log(
      `spot checks, Chromium tabs vs the Node verifier: ${done.length} checks, worst bucket ${worst.toExponential(2)} of the mass (tolerance ${RECOMPUTE_TOLERANCE})`,
    );
    expect(worst).toBeLessThan(RECOMPUTE_TOLERANCE / 10);
    await expectCleanAudit(coordinator, { committed: TRAIN_IMAGES });
  });
});
