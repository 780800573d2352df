/**
 * Every-step sync on a slow network says so (coordinator/machine/sync-advice.ts), end to end without a
 * browser (test/kit/simulation.ts: the real coordinator machine, the real elastic loop and collectives
 * over in-memory channels with a latency, CPU trainers that take a while per step): the coordinator's
 * status carries the advice and its log the `sync_advice` event once steps wait on the links; on fast
 * links, and in local mode on the same slow links, it stays silent.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { statusSummary } from '../../../../coordinator/machine/status-view';
import { parseJobSpec, type JobSpecInput } from '../../../../core/training/job';
import { SIM_DATASET, SIM_JOB, simulatedSwarm } from '../../../kit/simulation';

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

/** Two simulated tabs training `job` over channels of `latencyMs` each way, each step's compute `computeMs` long. */
async function twoTabs(job: JobSpecInput, latencyMs: number, computeMs: number) {
  // A slow heartbeat keeps a loaded machine from declaring the slow-stepping tabs dead.
  const spec = parseJobSpec({ ...job, heartbeatMs: 2000, minWorkers: 2, maxWorkers: 2 });
  const swarm = simulatedSwarm(spec, SIM_DATASET, { runId: 'sim-slow', links: { latencyMs } });
  cleanups.push(swarm.stop);
  await Promise.all([swarm.open('a', computeMs), swarm.open('b', computeMs)]);
  return swarm;
}

describe('every-step sync on slow links (simulated tabs)', () => {
  it('puts the advice in the status and the log once steps wait on the network', async () => {
    const swarm = await twoTabs(SIM_JOB, 150, 2);
    await swarm.waitFor(
      () => statusSummary(swarm.coordinator.state, Date.now()).syncAdvice !== null,
      'the sync advice',
      30_000,
    );
    const advice = statusSummary(swarm.coordinator.state, Date.now()).syncAdvice!;
    // Two ring steps of 150 ms each way per allreduce, against a few ms of compute.
    expect(advice.syncMsPerStep).toBeGreaterThanOrEqual(250);
    expect(advice.syncMsPerStep).toBeGreaterThan(advice.computeMsPerStep);
    expect(advice.suggested).toMatchObject({ mode: 'local', compression: 'int8' });
    expect(swarm.coordinator.log.some((l) => l.event === 'sync_advice')).toBe(true);
  });

  it('stays silent where the links keep up with the compute', async () => {
    const swarm = await twoTabs(SIM_JOB, 0, 30);
    await swarm.waitFor(() => swarm.committed() >= 8, '8 commits', 30_000);
    expect(statusSummary(swarm.coordinator.state, Date.now()).syncAdvice).toBeNull();
    expect(swarm.coordinator.log.some((l) => l.event === 'sync_advice')).toBe(false);
  });

  it('stays silent in local mode on the same slow links', async () => {
    const local = { ...SIM_JOB, sync: { mode: 'local', innerSteps: 4, compression: 'none' } } as JobSpecInput;
    const swarm = await twoTabs(local, 150, 2);
    await swarm.waitFor(() => swarm.committed() >= 8, '2 outer steps', 30_000);
    expect(statusSummary(swarm.coordinator.state, Date.now()).syncAdvice).toBeNull();
  });
});
