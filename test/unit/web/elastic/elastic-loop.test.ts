/**
 * The elastic loop end to end without a browser: real coordinator state machine, real coordinator
 * client, real collectives over in-memory channels, a CPU trainer whose gradient sums are exact
 * (test/kit/simulation.ts). Churn must never change the trajectory: every committed step's
 * parameter hash equals the one of an uninterrupted single-tab run, bit for bit.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { parseJobSpec, type JobSpec } from '../../../../core/training/job';
import {
  auditCommitRows,
  SIM_DATASET,
  SIM_JOB,
  SIM_TOTAL_STEPS,
  simulatedSwarm,
  type StoredCommit,
} from '../../../kit/simulation';
import { workerCount } from '../../../../coordinator/machine/worker-table';

const DATASET = SIM_DATASET;
const job: JobSpec = parseJobSpec(SIM_JOB);
const TOTAL_STEPS = SIM_TOTAL_STEPS;

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

function setUp() {
  const swarm = simulatedSwarm(job, DATASET);
  cleanups.push(swarm.stop);
  return swarm;
}

/** The per-step commit hashes of an uninterrupted single-tab run. */
let referenceHashes: Map<number, string> | null = null;
async function reference(): Promise<Map<number, string>> {
  if (referenceHashes) return referenceHashes;
  const { coordinator, open, waitFor } = setUp();
  const tab = open('solo', 0);
  await waitFor(
    () => coordinator.state.status === 'done' && tab.loop.status.phase === 'done',
    'the reference run to finish',
  );
  expect(tab.loop.status.checkpointsUploaded).toBeGreaterThan(0);
  referenceHashes = new Map(coordinator.liveCommits().map((c) => [c.step, c.hash]));
  for (const c of cleanups.splice(0).reverse()) c();
  return referenceHashes;
}

/** Invariant (1) (docs/ARCHITECTURE.md) from the commit rows: each index once per epoch, finished epochs complete. */
function auditCommits(commits: StoredCommit[]): void {
  // Every-step mode never leaves holes: the job ends at its planned last step.
  const done = commits.some((c) => c.step === TOTAL_STEPS);
  const run = { seed: job.seed, datasetSize: DATASET, epochs: job.epochs, done };
  expect(auditCommitRows(commits, run)).toEqual({ twice: [], missing: [] });
}

function expectSameTrajectory(commits: StoredCommit[], ref: Map<number, string>): void {
  expect(commits.map((c) => c.step)).toEqual(Array.from({ length: TOTAL_STEPS }, (_, i) => i + 1));
  for (const c of commits) expect(c.hash, `hash of step ${c.step}`).toBe(ref.get(c.step));
}

describe('elastic loop (simulated tabs, real coordinator machine)', () => {
  it('trains alone to the end, committing every step and uploading the requested checkpoints', {
    timeout: 30_000,
  }, async () => {
    const ref = await reference();
    expect(ref.size).toBe(TOTAL_STEPS);
  });

  it('survives a goodbye, a join and a crash with the trajectory of an uninterrupted run', {
    timeout: 30_000,
  }, async () => {
    const ref = await reference();
    const { coordinator, open, committed, waitFor, tabs } = setUp();
    const [a, b, c] = [open('a'), open('b'), open('c')];
    await waitFor(
      () => committed() >= 3 && coordinator.state.rendezvous.participants.length === 3,
      'three tabs training',
    );
    const restartsBefore = coordinator.state.restarts;

    a.goodbye();
    const afterGoodbye = committed();
    await waitFor(
      () => committed() >= afterGoodbye + 2 && coordinator.state.rendezvous.participants.length === 2,
      'two tabs training on',
    );
    expect(coordinator.state.restarts).toBe(restartsBefore); // a goodbye is not a restart

    const d = open('d');
    await waitFor(
      () => d.loop.status.phase === 'training' && coordinator.state.rendezvous.participants.length === 3,
      'the newcomer admitted',
    );
    expect(d.loop.status.lastSync).toBe('receive');
    expect(coordinator.state.restarts).toBe(restartsBefore); // nor is a join

    const beforeCrash = committed();
    await waitFor(() => committed() >= beforeCrash + 1, 'a step with the newcomer');
    b.crash();
    const afterCrash = committed();
    await waitFor(
      () => committed() >= afterCrash + 2 && coordinator.state.rendezvous.participants.length === 2,
      'survivors training on',
    );
    expect(coordinator.state.restarts).toBe(restartsBefore + 1);

    await waitFor(() => coordinator.state.status === 'done', 'the job to finish');
    await waitFor(() => [c, d].every((t) => t.loop.status.phase === 'done'), 'survivors to see done');
    const commits = coordinator.liveCommits();
    expectSameTrajectory(commits, ref);
    auditCommits(commits);
    for (const t of [c, d]) expect(await t.trainer.hash()).toBe(ref.get(TOTAL_STEPS));
    expect(coordinator.state.restarts).toBe(restartsBefore + 1);
    expect(tabs.length).toBe(4);
  });

  it('resumes from the last durable checkpoint when every tab is gone', { timeout: 30_000 }, async () => {
    const ref = await reference();
    const { coordinator, open, committed, waitFor } = setUp();
    const [a, b] = [open('a', 2), open('b', 2)];
    await waitFor(
      () => coordinator.state.checkpoints.length > 0 && committed() >= 6,
      'a checkpoint and a few more steps',
    );
    a.crash();
    b.crash();
    await waitFor(() => workerCount(coordinator.state.workers) === 0, 'the coordinator to notice');
    const checkpoint = coordinator.state.checkpoints.at(-1)!;
    const lost = committed();
    expect(lost).toBeGreaterThan(checkpoint.step);

    const c = open('c');
    await waitFor(() => c.loop.status.phase === 'training', 'the new tab training');
    expect(c.loop.status.lastSync).toBe('checkpoint');
    expect(c.trainer.calls).toContain('restore');
    await waitFor(() => coordinator.state.status === 'done', 'the job to finish');
    const commits = coordinator.liveCommits();
    expectSameTrajectory(commits, ref);
    auditCommits(commits);
    // The steps after the checkpoint were rolled back and committed again.
    expect(coordinator.commits.filter((r) => r.rolledBack).map((r) => r.step)).toEqual(
      Array.from({ length: lost - checkpoint.step }, (_, i) => checkpoint.step + 1 + i),
    );
    expect(await c.trainer.hash()).toBe(ref.get(TOTAL_STEPS));
  });

  it('re-forms the ring when a data channel between two live tabs fails, blaming the peer', {
    timeout: 30_000,
  }, async () => {
    const ref = await reference();
    const { coordinator, network, open, committed, waitFor } = setUp();
    const [a, b, c] = [open('a', 2), open('b', 2), open('c', 2)];
    await waitFor(
      () => committed() >= 4 && coordinator.state.rendezvous.participants.length === 3,
      'three tabs training',
    );
    const closedBefore = coordinator.log.filter((l) => l.event === 'round_closed').length;
    network.cut(a.peerId, b.peerId);
    await waitFor(
      () =>
        coordinator.log.filter((l) => l.event === 'round_closed' && l.data.reason === 'failure').length > 0 &&
        coordinator.log.filter((l) => l.event === 'round_closed').length > closedBefore,
      'the failure to close the round',
    );
    expect([a, b, c].reduce((n, t) => n + t.loop.status.failuresReported, 0)).toBeGreaterThan(0);
    expect(coordinator.log.some((l) => l.event === 'failure_report' && typeof l.data.peer === 'string')).toBe(true);
    await waitFor(() => coordinator.state.status === 'done', 'the job to finish');
    const commits = coordinator.liveCommits();
    expectSameTrajectory(commits, ref);
    auditCommits(commits);
  });

  it('offers a reported step it never saw committed when the coordinator restarts right after committing it', {
    timeout: 30_000,
  }, async () => {
    const ref = await reference();
    const { coordinator, open, committed, waitFor } = setUp();
    const [a, b] = [open('a', 2), open('b', 2)];
    await waitFor(() => committed() >= 3, 'a few steps');
    // The coordinator commits the next step durably but dies before `committed` leaves.
    coordinator.dropped.add('committed');
    const before = committed();
    await waitFor(() => committed() > before, 'one more commit');
    coordinator.kill();
    const lost = committed();
    await waitFor(() => [a, b].every((t) => t.loop.status.phase === 'connecting'), 'the tabs to notice');
    for (const t of [a, b]) {
      expect(t.loop.holding()).toMatchObject({ haveStep: lost - 1, pending: { step: lost, hash: ref.get(lost) } });
    }
    coordinator.restart();
    await waitFor(() => committed() > lost, 'training to continue after the restart');
    // The pending state was the committed one: nothing was rolled back or recomputed.
    expect(coordinator.commits.filter((r) => r.rolledBack)).toEqual([]);
    await waitFor(() => coordinator.state.status === 'done', 'the job to finish');
    const commits = coordinator.liveCommits();
    expectSameTrajectory(commits, ref);
    auditCommits(commits);
  });

  it('picks up where it was after the coordinator restarts', { timeout: 30_000 }, async () => {
    const ref = await reference();
    const { coordinator, open, committed, waitFor } = setUp();
    const [a, b] = [open('a', 2), open('b', 2)];
    await waitFor(() => committed() >= 5, 'a few steps');
    coordinator.kill();
    await waitFor(() => [a, b].every((t) => t.loop.status.phase === 'connecting'), 'the tabs to notice');
    coordinator.restart();
    await waitFor(() => coordinator.state.status === 'done', 'the job to finish after the restart');
    const commits = coordinator.liveCommits();
    expectSameTrajectory(commits, ref);
    auditCommits(commits);
    for (const t of [a, b]) expect(await t.trainer.hash()).toBe(ref.get(TOTAL_STEPS));
  });
});
