/**
 * Overlapped outer steps (local sync mode with `sync.overlap`, docs/local-steps.md "Overlapped outer
 * steps") end to end without a browser (test/kit/simulation.ts: the real coordinator machine through the
 * product executor, the real elastic loop and collectives over in-memory channels with latency, CPU
 * trainers). A run without churn equals eager DiLoCo driven by hand through the same worker calls; the
 * next group's inner steps really run while an outer step's allreduce is in flight; under goodbye,
 * crash (also while an allreduce is in flight: two groups carried on), join and a coordinator restart
 * inside an overlapped outer step, the product's own audit is clean, nothing is rolled back or computed
 * twice where a carry applies, and the survivors agree bit for bit with the last commit.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { auditRun } from '../../../../coordinator/admin/audit';
import { groupInFlight } from '../../../../coordinator/machine/group';
import { planOf, slotsRanges } from '../../../../core/training/groups';
import { jobPublic, parseJobSpec, type JobSpec, type JobSpecInput } from '../../../../core/training/job';
import { outerWeight } from '../../../../core/training/outer-weights';
import { overlapsNext, successorPlan } from '../../../../core/training/overlap';
import {
  auditCommitRows,
  SIM_DATASET,
  SIM_JOB,
  simulatedSwarm,
  type SimCoordinator,
  type StoredCommit,
} from '../../../kit/simulation';
import { handTrainers, innerSteps, sumInRankOrder } from '../../../kit/diloco-by-hand';
import { goodbyeJoinCrash } from '../../../kit/goodbye-join-crash';
import { walkGroups } from '../../../support/group-walk';

const DATASET = SIM_DATASET;
const H = 4;
const BASE: JobSpecInput = {
  ...SIM_JOB,
  // Losses are seen by closed sockets; a slow heartbeat keeps a loaded machine from declaring live tabs dead.
  heartbeatMs: 1000,
  sync: {
    mode: 'local',
    innerSteps: H,
    outer: { kind: 'nesterov', lr: 0.7, momentum: 0.9 },
    compression: 'none',
    overlap: true,
  },
};
/** Outer steps end every 4 steps and at each epoch's end (13 steps an epoch): as without overlap. */
const OUTER_ENDS = [4, 8, 12, 13, 17, 21, 25, 26];
/** Each message on a data channel takes this long: an allreduce lasts several inner steps. */
const LINKS = { latencyMs: 15 };

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

function setUp(job: JobSpec) {
  const swarm = simulatedSwarm(job, DATASET, { runId: 'sim-overlap', links: LINKS });
  cleanups.push(swarm.stop);
  return swarm;
}

/** The product's audit (coordinator/admin/audit.ts) over the simulation's commit rows. */
function productAudit(coordinator: SimCoordinator) {
  const rows = coordinator.commits.map((c) => ({ ...c, committedAt: 0 }));
  return auditRun(coordinator.state, rows, rows.filter((r) => r.rolledBack).length);
}

function expectCleanAudit(job: JobSpec, coordinator: SimCoordinator, commits: StoredCommit[]): void {
  expect(productAudit(coordinator).ok).toBe(true);
  const run = { seed: job.seed, datasetSize: DATASET, epochs: job.epochs, done: true };
  expect(auditCommitRows(commits, run)).toEqual({ twice: [], missing: [] });
}

/**
 * Eager DiLoCo by hand (web/worker/eager-outer.ts through the trainer's calls): `world` CPU trainers
 * with equal shares take each group's inner steps on their slices; a group that overlaps ends with the
 * eager step (after the previous outer step's consensus is committed) and its sums' consensus step; one
 * that does not ends with the synchronous outer step. Sums in rank order (two ranks: the ring's sum is
 * the same float32 addition). Returns each commit point's hash.
 */
async function eagerReference(job: JobSpec, world: number): Promise<Map<number, string>> {
  const plan = jobPublic(job, DATASET);
  const trainers = await handTrainers(job, world);
  for (const t of trainers) await t.resetOuter();
  const hashes = new Map<number, string>();
  const shares = new Array<number>(world).fill(1 / world);
  let inFlight = false;
  for (const { group } of walkGroups(plan)) {
    const own = await innerSteps(trainers, job, DATASET, group, shares);
    if (inFlight) for (const t of trainers) await t.commitConsensus();
    const weights = own.map((n) => outerWeight(n, group.count));
    const overlapped = overlapsNext(job, group, plan, { carriedThrough: null, drainedAt: null });
    const parts = await Promise.all(
      trainers.map((t, r) => (overlapped ? t.eagerOuter(weights[r]) : t.pseudoGradient(weights[r]))),
    );
    const total = sumInRankOrder(parts);
    const stepHashes = await Promise.all(
      trainers.map((t) => (overlapped ? t.consensusStep(total.slice().buffer) : t.applyOuter(total.slice().buffer))),
    );
    expect(new Set(stepHashes).size).toBe(1);
    hashes.set(group.lastStep, stepHashes[0]);
    if (!overlapped) for (const t of trainers) await t.saveBackup();
    inFlight = overlapped;
  }
  return hashes;
}

describe('overlapped outer steps (simulated tabs, real coordinator machine)', () => {
  it('one tab: commits at the same outer steps as without overlap, each equal to eager DiLoCo driven by hand', {
    timeout: 60_000,
  }, async () => {
    const job = parseJobSpec(BASE);
    const ref = await eagerReference(job, 1);
    const { coordinator, open, waitFor } = setUp(job);
    const tab = open('solo', 0);
    await waitFor(() => coordinator.state.status === 'done' && tab.loop.status.phase === 'done', 'the run', 30_000);
    const commits = coordinator.liveCommits();
    expect(commits.map((c) => c.step)).toEqual(OUTER_ENDS);
    for (const c of commits) expect(c.hash, `outer step ending at ${c.step}`).toBe(ref.get(c.step));
    expectCleanAudit(job, coordinator, commits);
    // The job's last outer step is synchronous: the tab ends on the committed state.
    expect(await tab.trainer.hash()).toBe(commits.at(-1)!.hash);
    expect(tab.trainer.calls.filter((c) => c === 'eagerOuter')).toHaveLength(6);
    expect(tab.loop.status.checkpointsUploaded).toBeGreaterThan(0);
  });

  it('two tabs: every commit equals the two-rank reference, and the next group’s inner steps run during the allreduce', {
    timeout: 60_000,
  }, async () => {
    const job = parseJobSpec({ ...BASE, minWorkers: 2 });
    const ref = await eagerReference(job, 2);
    const { coordinator, open, waitFor } = setUp(job);
    const tabs = [open('a', 1), open('b', 1)];
    // Inner steps of the next group reported while the group in flight still waits for its outer step.
    let overlapSeen = false;
    await waitFor(
      () => {
        const s = coordinator.state;
        if (s.status !== 'active' || s.rendezvous.phase !== 'training') return s.status === 'done';
        overlapSeen ||= s.rendezvous.participants.some((p) => p.lastStep > groupInFlight(s).lastStep);
        return false;
      },
      'the run',
      30_000,
    );
    await waitFor(() => tabs.every((t) => t.loop.status.phase === 'done'), 'both tabs to see done');
    expect(overlapSeen).toBe(true);
    const commits = coordinator.liveCommits();
    expect(commits.map((c) => c.step)).toEqual(OUTER_ENDS);
    for (const c of commits) expect(c.hash, `outer step ending at ${c.step}`).toBe(ref.get(c.step));
    for (const t of tabs) expect(await t.trainer.hash()).toBe(commits.at(-1)!.hash);
    expectCleanAudit(job, coordinator, commits);
    // Wire bytes: one allreduce per outer step, reported apart from the steps (outer_report).
    const usage = coordinator.state.usage!.total;
    expect(usage.wireBytes).toBeGreaterThan(0);
    expect(usage.wireSamples).toBe(2 * DATASET);
  });

  it('goodbye, join and crash inside overlapped outer steps (int8 wire): only the lost shares, a clean audit, agreed hashes', {
    timeout: 60_000,
  }, async () => {
    const job = parseJobSpec({ ...BASE, sync: { ...BASE.sync, compression: 'int8' } as JobSpecInput['sync'] });
    const swarm = setUp(job);
    const { coordinator } = swarm;
    const {
      survivors: [c, d],
    } = await goodbyeJoinCrash(swarm);
    const commits = coordinator.liveCommits();
    expectCleanAudit(job, coordinator, commits);
    // The goodbye and the crash were inside outer steps: committed without the lost rank, not redone.
    expect(commits.some((row) => row.skipped)).toBe(true);
    expect(coordinator.commits.filter((row) => row.rolledBack)).toEqual([]);
    for (const t of [c, d]) expect(await t.trainer.hash()).toBe(commits.at(-1)!.hash);
    expect(d.loop.status.samplesCommitted).toBeGreaterThan(0);
  });

  it('a join while outer steps overlap: the coordinator drains the next outer step, then admits the newcomer', {
    timeout: 60_000,
  }, async () => {
    const job = parseJobSpec({ ...BASE, minWorkers: 2 });
    const { coordinator, open, committed, waitFor } = setUp(job);
    const [a, b] = [open('a', 2), open('b', 2)];
    await waitFor(() => {
      const s = coordinator.state;
      if (committed() < 4 || s.rendezvous.phase !== 'training' || s.rendezvous.carry) return false;
      return s.rendezvous.participants.some((p) => p.lastStep > groupInFlight(s).lastStep);
    }, 'the next group’s inner steps during an outer step');
    const restarts = coordinator.state.restarts;
    const c = open('c', 2);
    await waitFor(() => coordinator.state.rendezvous.participants.length === 3, 'the newcomer admitted', 20_000);
    // Admitted at the commit after a drained (synchronous) outer step, not by closing the round with two
    // groups in flight: nothing was undone.
    const drained = coordinator.log.find((l) => l.event === 'commit' && l.data.drain === true);
    expect(drained).toBeDefined();
    const membership = coordinator.log.find((l) => l.event === 'round_closed' && l.data.reason === 'membership')!;
    expect(membership.data.restore).toBe(false);
    await waitFor(() => coordinator.state.status === 'done', 'the job to finish', 30_000);
    await waitFor(() => [a, b, c].every((t) => t.loop.status.phase === 'done'), 'the tabs to see done');
    const commits = coordinator.liveCommits();
    expectCleanAudit(job, coordinator, commits);
    expect(coordinator.state.restarts).toBe(restarts);
    expect(coordinator.commits.filter((r) => r.rolledBack)).toEqual([]);
    // At most the one step a tab applies behind the drained commit before the round closes is undone.
    for (const t of [a, b]) expect(t.loop.status.restores, `${t.name} restores`).toBeLessThanOrEqual(1);
    for (const t of [a, b, c]) expect(await t.trainer.hash()).toBe(commits.at(-1)!.hash);
    expect(c.loop.status.samplesCommitted).toBeGreaterThan(0);
  });

  it('a crash while an overlapped allreduce is in flight carries both groups on: each commits without the lost slices', {
    timeout: 60_000,
  }, async () => {
    const job = parseJobSpec({ ...BASE, minWorkers: 2 });
    const { coordinator, open, waitFor, tabs } = setUp(job);
    // One slow tab: the fast ones finish a group, start its allreduce (which waits for the slow one) and
    // go on with the next group's inner steps meanwhile.
    open('fast1', 1);
    open('fast2', 1);
    open('slow', 12);
    let lost: { slot: number; workerId: string; shares: number[]; first: ReturnType<typeof groupInFlight> } | null =
      null;
    await waitFor(() => {
      const s = coordinator.state;
      if (s.status !== 'active' || s.rendezvous.phase !== 'training' || s.rendezvous.participants.length !== 3)
        return false;
      const group = groupInFlight(s);
      const ahead = s.rendezvous.participants.find((p) => p.lastStep > group.lastStep);
      if (!ahead || s.lastCommit.step >= group.lastStep) return false;
      lost = {
        slot: ahead.slot,
        workerId: ahead.workerId,
        shares: s.rendezvous.participants.map((p) => p.share),
        first: group,
      };
      return true;
    }, 'a rank in the next group while the group in flight waits for its outer step');
    const gone = tabs.find((t) => t.loop.status.workerId === lost!.workerId)!;
    gone.crash();
    const { first, shares, slot } = lost!;
    const second = successorPlan(first, planOf(coordinator.state));
    await waitFor(() => coordinator.state.status === 'done', 'the job to finish', 30_000);
    const survivors = tabs.filter((t) => t !== gone);
    await waitFor(() => survivors.every((t) => t.loop.status.phase === 'done'), 'survivors to see done');
    const carry = coordinator.log.find((l) => l.event === 'round_closed' && l.data.carry)!.data.carry as {
      through: number;
    };
    expect(carry.through).toBe(second.lastStep);
    const commits = coordinator.liveCommits();
    expect(commits.find((c) => c.step === first.lastStep)!.skipped).toEqual(slotsRanges(first, shares, [slot]));
    expect(commits.find((c) => c.step === second.lastStep)!.skipped).toEqual(slotsRanges(second, shares, [slot]));
    expectCleanAudit(job, coordinator, commits);
    expect(coordinator.commits.filter((row) => row.rolledBack)).toEqual([]);
    // The survivors kept their inner steps of both groups: nothing put back, nothing computed twice.
    for (const t of survivors) expect(t.loop.status.restores, `${t.name} restored nothing`).toBe(0);
    for (const t of survivors) expect(await t.trainer.hash()).toBe(commits.at(-1)!.hash);
  });

  it('a coordinator restart inside an overlapped outer step: the outer steps in flight are redone, nothing twice', {
    timeout: 60_000,
  }, async () => {
    const job = parseJobSpec({ ...BASE, minWorkers: 2 });
    const ref = await eagerReference(job, 2);
    const { coordinator, open, committed, waitFor } = setUp(job);
    const [a, b] = [open('a', 2), open('b', 2)];
    await waitFor(() => {
      const s = coordinator.state;
      if (committed() < 4 || s.rendezvous.phase !== 'training') return false;
      return s.rendezvous.participants.some((p) => p.lastStep > groupInFlight(s).lastStep);
    }, 'the next group’s inner steps during an outer step');
    coordinator.kill();
    await waitFor(() => [a, b].every((t) => t.loop.status.phase === 'connecting'), 'the tabs to notice');
    coordinator.restart();
    await waitFor(() => coordinator.state.status === 'done', 'the job to finish after the restart', 30_000);
    await waitFor(() => [a, b].every((t) => t.loop.status.phase === 'done'), 'both tabs to see done');
    const commits = coordinator.liveCommits();
    expectCleanAudit(job, coordinator, commits);
    expect(commits.map((c) => c.step)).toEqual(OUTER_ENDS);
    // Commits before the restart are the reference's; after it the run starts its own outer state
    // afresh from the committed one (reported, not promised), so only agreement is checked there.
    expect(commits[0].hash).toBe(ref.get(4));
    for (const t of [a, b]) expect(await t.trainer.hash()).toBe(commits.at(-1)!.hash);
    expect(coordinator.commits.filter((r) => r.rolledBack)).toEqual([]);
  });

  it('a coordinator that dies after an overlapped commit it never announced: the tabs’ reported consensus is kept, nothing rolled back', {
    timeout: 60_000,
  }, async () => {
    const job = parseJobSpec({ ...BASE, minWorkers: 2 });
    const { coordinator, open, committed, waitFor } = setUp(job);
    const [a, b] = [open('a', 2), open('b', 2)];
    await waitFor(() => {
      const s = coordinator.state;
      if (committed() < 4 || s.rendezvous.phase !== 'training') return false;
      return s.rendezvous.participants.some((p) => p.lastStep > groupInFlight(s).lastStep);
    }, 'the next group’s inner steps during an outer step');
    // The commit of the outer step in flight is made durable, but its `committed` never leaves.
    const before = committed();
    coordinator.dropped.add('committed');
    await waitFor(() => committed() > before, 'the unannounced commit');
    const unannounced = committed();
    coordinator.kill();
    await waitFor(() => [a, b].every((t) => t.loop.status.phase === 'connecting'), 'the tabs to notice');
    coordinator.restart();
    await waitFor(() => coordinator.state.status === 'done', 'the job to finish after the restart', 30_000);
    await waitFor(() => [a, b].every((t) => t.loop.status.phase === 'done'), 'both tabs to see done');
    // The tabs claimed the consensus they had reported (hello `pending`) and made it their state.
    expect(coordinator.log.some((l) => l.event === 'record_rolled_back')).toBe(false);
    const commits = coordinator.liveCommits();
    expect(commits.some((c) => c.step === unannounced)).toBe(true);
    expect(coordinator.commits.filter((r) => r.rolledBack)).toEqual([]);
    expectCleanAudit(job, coordinator, commits);
    for (const t of [a, b]) expect(await t.trainer.hash()).toBe(commits.at(-1)!.hash);
  });

  it('a worker hung in its eager step is blamed by its silent ring neighbour and costs only its share', {
    timeout: 60_000,
  }, async () => {
    const job = parseJobSpec({ ...BASE, minWorkers: 2, epochs: 3 });
    const { coordinator, open, committed, waitFor, tabs } = setUp(job);
    open('a', 2);
    open('b', 2);
    open('c', 2);
    await waitFor(
      () => committed() >= 2 * H && coordinator.state.rendezvous.participants.length === 3,
      'three tabs past two outer steps',
    );
    const member = coordinator.state.rendezvous.participants[1].workerId;
    const hung = tabs.find((t) => t.loop.status.workerId === member)!;
    hung.trainer.hang('outer');
    const id = hung.loop.status.workerId;
    await waitFor(() => coordinator.log.some((l) => l.event === 'round_closed' && l.data.carry), 'the carry', 20_000);
    const report = coordinator.log.find((l) => l.event === 'failure_report')!;
    expect(report.data.peer).toBe(id);
    expect(String(report.data.reason)).toMatch(/sent nothing/);
    hung.trainer.resume();
    await waitFor(() => coordinator.state.status === 'done', 'the job to finish', 30_000);
    const survivors = tabs.filter((t) => t !== hung);
    await waitFor(() => survivors.every((t) => t.loop.status.phase === 'done'), 'the survivors to see done');
    const commits = coordinator.liveCommits();
    expect(commits.some((c) => c.skipped)).toBe(true);
    expect(coordinator.commits.filter((r) => r.rolledBack)).toEqual([]);
    expect(productAudit(coordinator).ok).toBe(true);
    for (const t of survivors) expect(await t.trainer.hash()).toBe(commits.at(-1)!.hash);
  });
});
