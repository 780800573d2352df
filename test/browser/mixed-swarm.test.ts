/**
 * Chromium tabs and headless workers in one job: two tabs (the volunteer page, WebGPU on SwiftShader in
 * Chromium) and two headless workers (`tabswarm worker`: the same training worker and loop in Node, on
 * Dawn and node-datachannel) train local-mode outer steps together over WebRTC between both kinds. Every
 * commit needs all four ranks to report the same state hash, so commits by a world of four, with two
 * members of each kind, are hash-agreed across tabs and headless workers alike; no round closes for a
 * divergence and the audit is clean. Needs Chromium, the web build and WebGPU in Node: each skips here
 * when missing and fails under CI.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { skipWithoutChromium, skipWithoutWebBuild } from '../support/browser';
import { expectCleanAudit } from '../support/clean-audit';
import { commitRows } from '../support/commit-log';
import { MixedSwarm } from '../support/mixed-swarm';
import { nodeGpuAvailable } from '../support/node-gpu';
import { skipWithout } from '../support/skip';
import { coordinatorStatusUntil } from '../support/swarm';

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
  let mixed: MixedSwarm;

  beforeAll(async () => {
    mixed = await MixedSwarm.start({ job: JOB, trainCount: 640, seed: 3, name: 'mixed' });
  });

  afterAll(async () => {
    await mixed?.stop();
  });

  it('commits outer steps hash-agreed by two tabs and two headless workers, with a clean audit', async () => {
    const { coordinator, swarm } = mixed;
    await swarm.openMany(2);
    for (const name of ['hl-a', 'hl-b']) mixed.spawnHeadless(name);
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
