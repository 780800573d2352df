/**
 * Chromium tabs and headless workers in one job: two tabs (the volunteer page, WebGPU on SwiftShader in
 * Chromium) and two headless workers (`tabswarm worker`: the same training worker and loop in Node, on
 * Dawn and node-datachannel) train local-mode outer steps together over WebRTC between both kinds. Every
 * commit needs all four ranks to report the same state hash, so commits by a world of four, with two
 * members of each kind, are hash-agreed across tabs and headless workers alike; no round closes for a
 * divergence and the audit is clean. Needs Chromium, the web build and WebGPU in Node: each skips here
 * when missing and fails under CI.
 */
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HeadlessProcess, spawnHeadless } from '../../tools/swarm/headless-workers';
import { launchChromium, skipWithoutChromium, skipWithoutWebBuild, WEB_BUILD_DIR } from '../support/browser';
import { expectCleanAudit } from '../support/clean-audit';
import { commitRows } from '../support/commit-log';
import { CoordinatorProcess } from '../support/coordinator-process';
import { makeTempDir, writeFakeIdxDataset } from '../support/fake-dataset';
import { nodeGpuAvailable } from '../support/node-gpu';
import { skipWithout } from '../support/skip';
import { coordinatorStatusUntil, Swarm } from '../support/swarm';
import { join } from 'node:path';

const JOB = {
  model: 'tiny-mlp',
  optimizer: { kind: 'sgd', lr: 0.05, momentum: 0 },
  globalBatch: 32,
  epochs: 1000,
  minWorkers: 4,
  maxWorkers: 4,
  lastCallMs: 500,
  heartbeatMs: 1000,
  evalSamples: 0,
  checkpointEvery: 50,
  sync: { mode: 'local', innerSteps: 2, compression: 'int8' },
};

const skip =
  skipWithoutChromium() ||
  skipWithoutWebBuild() ||
  skipWithout('WebGPU in Node (Debian chromium ships SwiftShader)', await nodeGpuAvailable());

describe.skipIf(skip)('Chromium tabs and headless workers in one job', () => {
  let coordinator: CoordinatorProcess;
  let browser: Browser;
  let swarm: Swarm;
  const headless: HeadlessProcess[] = [];

  beforeAll(async () => {
    const datasetDir = writeFakeIdxDataset(join(makeTempDir('tabswarm-mixed-'), 'fake-mnist'), {
      trainCount: 640,
      testCount: 16,
      seed: 3,
    });
    coordinator = await CoordinatorProcess.spawn({ job: JOB, datasetDir, extraArgs: ['--dist', WEB_BUILD_DIR] });
    browser = await launchChromium();
    swarm = new Swarm(browser, coordinator.url, { query: { testSubset: '0' } });
  });

  afterAll(async () => {
    for (const h of headless) h.crash();
    await swarm?.closeAll().catch(() => undefined);
    await browser?.close();
    await coordinator?.stop();
  });

  it('commits outer steps hash-agreed by two tabs and two headless workers, with a clean audit', async () => {
    await swarm.openMany(2);
    for (const name of ['hl-a', 'hl-b'])
      headless.push(spawnHeadless({ url: coordinator.url, name, args: ['--no-cache', '--quiet'] }));
    const { status } = await coordinatorStatusUntil(
      coordinator,
      (s) => s.world.total === 4 && s.state === 'training' && s.step > 0,
      'a training world of four',
      { timeoutMs: 120_000, pollMs: 250 },
    );
    const kinds = status.world.items.map((w) => (w.peerId.startsWith('hl-') ? 'headless' : 'tab')).sort();
    expect(kinds).toEqual(['headless', 'headless', 'tab', 'tab']);
    const from = status.step;
    await coordinatorStatusUntil(
      coordinator,
      (s) => s.step >= from + 3 * JOB.sync.innerSteps,
      'three more outer commits',
      {
        timeoutMs: 120_000,
        pollMs: 250,
      },
    );
    const byFour = (await commitRows(coordinator)).filter((r) => r.world === 4);
    expect(byFour.length).toBeGreaterThanOrEqual(3);
    for (const r of byFour) expect(r.hash).toMatch(/^[0-9a-f]{64}$/);
    expect((await coordinator.events()).filter((e) => e.event === 'divergence')).toEqual([]);
    await expectCleanAudit(coordinator);
    expect(swarm.problems(/WebSocket|peer .* closed/)).toEqual([]);
  }, 300_000);
});
