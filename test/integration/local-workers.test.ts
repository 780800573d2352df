/**
 * `tabswarm coordinator --local-workers 2` (`npm start -- --local-workers 2`): the coordinator starts two
 * headless workers beside it, they train together, and SIGTERM (Ctrl-C) makes each say goodbye before the
 * coordinator closes: after a restart on the same data dir, the event log holds a `leave` with reason
 * `goodbye` for both, no worker failure, and the audit is clean. Needs WebGPU in Node (Dawn on SwiftShader):
 * skips here without it and fails under CI.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { expectCleanAudit } from '../support/clean-audit';
import { type CoordinatorProcess, spawnCoordinator } from '../support/coordinator-process';
import { skipWithoutNodeGpu } from '../support/node-gpu';
import { coordinatorStatusUntil } from '../support/swarm';

const JOB = {
  model: 'tiny-mlp',
  globalBatch: 20,
  epochs: 100_000,
  minWorkers: 2,
  maxWorkers: 2,
  lastCallMs: 300,
  heartbeatMs: 1000,
  evalSamples: 0,
  sync: { mode: 'local', innerSteps: 2, compression: 'int8' },
};

describe.skipIf(await skipWithoutNodeGpu())('coordinator --local-workers', () => {
  let proc: CoordinatorProcess | undefined;
  afterAll(async () => {
    await proc?.stop();
  });

  it('starts two headless workers that train, and on SIGTERM they say goodbye before it closes', async () => {
    const first = await spawnCoordinator({ job: JOB, extraArgs: ['--local-workers', '2'] });
    proc = first;
    const { status } = await coordinatorStatusUntil(
      first,
      (s) => s.world.total === 2 && s.step >= 4,
      'two local workers committing',
      {
        timeoutMs: 120_000,
        pollMs: 250,
      },
    );
    expect(status.world.items.map((w) => w.peerId.replace(/-[0-9a-f]+$/, '')).sort()).toEqual(['local-1', 'local-2']);
    expect((await first.stop(20_000)).code).toBe(0);
    proc = await first.restart({ extraArgs: [] });
    const events = await proc.events();
    const goodbyes = events.filter((e) => e.event === 'leave' && e.data.reason === 'goodbye');
    expect(goodbyes.map((e) => e.data.workerId).sort()).toEqual(status.world.items.map((w) => w.id).sort());
    expect(events.filter((e) => e.event === 'worker_failed')).toEqual([]);
    await expectCleanAudit(proc);
  }, 240_000);
});
