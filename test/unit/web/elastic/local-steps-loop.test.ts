/**
 * Local sync mode end to end without a browser (test/kit/simulation.ts: the real coordinator machine,
 * the real elastic loop and collectives over in-memory channels, a CPU trainer). The sample record
 * must stay exactly-once under churn inside an outer step (goodbye, crash, join, a coordinator
 * restart), commits happen only at outer steps, and a run without churn equals a reference computed
 * by driving the trainers by hand through DiLoCo's steps.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { jobPublic, parseJobSpec, type JobSpec, type JobSpecInput } from '../../../../core/training/job';
import { parameterLayout } from '../../../../core/training/model-spec';
import { handTrainers, innerSteps, sumInRankOrder } from '../../../kit/diloco-by-hand';
import { goodbyeJoinCrash } from '../../../kit/goodbye-join-crash';
import { walkGroups } from '../../../support/group-walk';
import {
  auditCommitRows,
  SIM_DATASET,
  SIM_JOB,
  SIM_MODEL,
  SIM_TOTAL_STEPS,
  simulatedSwarm,
  type StoredCommit,
} from '../../../kit/simulation';
import { ringAllreduceBusBytes } from '../../../../web/net/ring-allreduce';
import { outerWeight } from '../../../../core/training/outer-weights';

const DATASET = SIM_DATASET;
const BASE: JobSpecInput = {
  ...SIM_JOB,
  // Crashes are seen by their closed sockets; a slow heartbeat keeps a loaded machine (a starved event
  // loop) from declaring live tabs dead, which would change the world and the hand-computed reference.
  heartbeatMs: 1000,
  sync: { mode: 'local', innerSteps: 4, outer: { kind: 'nesterov', lr: 0.7, momentum: 0.9 }, compression: 'none' },
};
const TOTAL_STEPS = SIM_TOTAL_STEPS;
/** Outer steps end every 4 steps and at each epoch's end. */
const OUTER_ENDS = [4, 8, 12, 13, 17, 21, 25, 26];

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

function setUp(job: JobSpec) {
  const swarm = simulatedSwarm(job, DATASET, { runId: 'sim-local' });
  cleanups.push(swarm.stop);
  return swarm;
}

/**
 * Invariant (1) of docs/ARCHITECTURE.md from the commit rows, and (for a run without partial commits)
 * commits only at outer steps.
 */
function auditCommits(job: JobSpec, commits: StoredCommit[], done = true): void {
  if (job.sync.mode === 'local' && !commits.some((c) => c.skipped))
    expect(commits.map((c) => c.step)).toEqual(OUTER_ENDS.slice(0, commits.length));
  const run = { seed: job.seed, datasetSize: DATASET, epochs: job.epochs, done };
  expect(auditCommitRows(commits, run)).toEqual({ twice: [], missing: [] });
}

/**
 * DiLoCo by hand: `world` CPU trainers with equal shares take the inner steps of each outer step on
 * their slices, then the sample-weighted pseudo-gradients are summed in rank order (two ranks: the
 * ring's sum is the same float32 addition) and every trainer takes the same Nesterov step.
 */
async function handReference(job: JobSpec, world: number): Promise<Map<number, string>> {
  const plan = jobPublic(job, DATASET);
  const trainers = await handTrainers(job, world);
  const hashes = new Map<number, string>();
  const shares = new Array<number>(world).fill(1 / world);
  for (const { group } of walkGroups(plan)) {
    const own = await innerSteps(trainers, job, DATASET, group, shares);
    const parts = await Promise.all(trainers.map((t, r) => t.pseudoGradient(outerWeight(own[r], group.count))));
    const sum = sumInRankOrder(parts);
    const stepHashes = await Promise.all(trainers.map((t) => t.applyOuter(sum.slice().buffer)));
    expect(new Set(stepHashes).size).toBe(1);
    hashes.set(group.lastStep, stepHashes[0]);
    for (const t of trainers) await t.saveBackup();
  }
  return hashes;
}

describe('local sync mode (simulated tabs, real coordinator machine)', () => {
  it('one tab: commits only at outer steps, each equal to DiLoCo driven by hand', { timeout: 30_000 }, async () => {
    const job = parseJobSpec(BASE);
    const ref = await handReference(job, 1);
    const { coordinator, open, waitFor } = setUp(job);
    const tab = open('solo', 0);
    await waitFor(() => coordinator.state.status === 'done' && tab.loop.status.phase === 'done', 'the run to finish');
    const commits = coordinator.liveCommits();
    expect(commits.map((c) => c.step)).toEqual(OUTER_ENDS);
    for (const c of commits) expect(c.hash, `outer step ending at ${c.step}`).toBe(ref.get(c.step));
    auditCommits(job, commits);
    // Inner steps are not hashed: one read-back of the parameters per outer step, not per step.
    expect(tab.trainer.calls.filter((c) => c === 'applyOuter')).toHaveLength(OUTER_ENDS.length);
    expect(tab.loop.status.checkpointsUploaded).toBeGreaterThan(0);
  });

  it('two tabs: every outer commit equals the hand-driven two-rank reference', { timeout: 30_000 }, async () => {
    const job = parseJobSpec({ ...BASE, minWorkers: 2 });
    const ref = await handReference(job, 2);
    const { coordinator, open, waitFor } = setUp(job);
    const tabs = [open('a', 0), open('b', 0)];
    await waitFor(() => coordinator.state.status === 'done', 'the run to finish');
    await waitFor(() => tabs.every((t) => t.loop.status.phase === 'done'), 'both tabs to see done');
    const commits = coordinator.liveCommits();
    expect(commits.map((c) => c.step)).toEqual(OUTER_ENDS);
    for (const c of commits) expect(c.hash, `outer step ending at ${c.step}`).toBe(ref.get(c.step));
    for (const t of tabs) expect(await t.trainer.hash()).toBe(ref.get(TOTAL_STEPS));
    // Bytes per sample as the tabs report them: one allreduce of the model per outer step, by the ring formula.
    const elements = new Float32Array(await tabs[0].trainer.pseudoGradient(0)).length;
    const perOuter = ringAllreduceBusBytes(elements, 2, 'none');
    const usage = coordinator.state.usage!.total;
    expect(usage.wireBytes).toBe(2 * OUTER_ENDS.length * Math.round(perOuter));
    expect(usage.wireSamples).toBe(2 * DATASET);
    // Compute time is claimed per report and clamped: never more than the wall time it sits in.
    expect(usage.computeMs).toBeGreaterThan(0);
    expect(usage.computeMs).toBeLessThanOrEqual(usage.wallMs);
  });

  it('every-step mode reports one allreduce of the gradient per step as its bytes', { timeout: 30_000 }, async () => {
    const job = parseJobSpec({ ...BASE, minWorkers: 2, sync: { mode: 'every-step', compression: 'fp16' } });
    const { coordinator, open, waitFor } = setUp(job);
    open('a', 0);
    open('b', 0);
    await waitFor(() => coordinator.state.status === 'done', 'the run to finish');
    const perStep = Math.round(ringAllreduceBusBytes(parameterLayout(SIM_MODEL).totalElements, 2, 'fp16'));
    const usage = coordinator.state.usage!.total;
    expect(usage.wireBytes).toBe(2 * TOTAL_STEPS * perStep);
  });

  it.each([
    ['local, int8', { ...BASE.sync, compression: 'int8' }],
    ['local, fp16', { ...BASE.sync, compression: 'fp16' }],
    ['every-step, int8', { mode: 'every-step', compression: 'int8' }],
  ] as const)(
    'a verifying job (%s, three tabs, a crash, a newcomer): every report’s sketches pass the coordinator’s checks, every outer step starts from its backup',
    {
      timeout: 30_000,
    },
    async (_, sync) => {
      // Checks of the sketches and of every hop at every commit; no recomputation drawn (no verifier here).
      const verify = { probability: 0, newcomer: { probability: 0, checks: 0 } };
      const job = parseJobSpec({ ...BASE, sync: sync as JobSpecInput['sync'], verify });
      const { coordinator, open, committed, waitFor, tabs } = setUp(job);
      const [a, b] = [open('a', 2), open('b', 2), open('c', 2)];
      await waitFor(
        () => committed() >= 8 && coordinator.state.rendezvous.participants.length === 3,
        'two outer steps, three tabs',
      );
      const midOuter = () => coordinator.state.rendezvous.participants.some((p) => p.lastStep > committed());
      await waitFor(midOuter, 'inner steps past the commit');
      // Inside an outer step: a local-mode job that verifies carries it on without the crashed tab.
      a.crash();
      await waitFor(() => committed() >= 13, 'the survivors going on');
      // A newcomer gets the state by a broadcast along the ring, which a member between its root and the
      // newcomer relays and takes: its inner steps then start from the root's moments, and so must its backup.
      await waitFor(midOuter, 'inner steps past the commit');
      const d = open('d', 2);
      const round = () => coordinator.state.rendezvous;
      await waitFor(
        () =>
          d.loop.status.workerId !== null &&
          round().phase === 'training' &&
          round().participants.some((p) => p.workerId === d.loop.status.workerId),
        'the newcomer training',
      );
      const joined = committed();
      await waitFor(() => committed() > joined, 'an outer step with the newcomer');
      b.goodbye();
      await waitFor(() => coordinator.state.status === 'done', 'the job to finish');
      // Reports of a round that just closed are refused as stale (normal after a crash); no report's
      // sketches may be refused, no hop fail, no rank diverge or be banned.
      const bad = ['ring_identity_failed', 'divergence', 'cheater_banned'];
      const events = coordinator.log.filter(
        (l) => bad.includes(l.event) || (l.event === 'message_rejected' && l.data.code !== 'stale_round'),
      );
      expect(events.map((l) => `${l.event} ${JSON.stringify(l.data).slice(0, 300)}`)).toEqual([]);
      auditCommits(job, coordinator.liveCommits());
      if (job.sync.mode === 'local') {
        // The crash cost only its slices (a partial commit), and nothing was redone.
        expect(coordinator.liveCommits().filter((row) => row.skipped).length).toBeGreaterThanOrEqual(1);
        expect(coordinator.commits.filter((row) => row.rolledBack)).toEqual([]);
        // The last outer step's claims: each survivor's moments (SGD: one) and its t.
        const claims = Object.values(coordinator.state.momentClaims!.byWorker);
        expect(claims.length).toBeGreaterThan(0);
        for (const c of claims) expect(c.moments).toHaveLength(1);
      }
      expect(tabs.length).toBe(4);
      for (const t of tabs) expect(t.trainer.problems).toEqual([]);
    },
  );

  it('goodbye, join and crash inside outer steps (int8 wire): each costs only its rank’s share, the record stays exactly once', {
    timeout: 30_000,
  }, async () => {
    const job = parseJobSpec({ ...BASE, sync: { ...BASE.sync, compression: 'int8' } as JobSpecInput['sync'] });
    const swarm = setUp(job);
    const { coordinator } = swarm;
    const {
      survivors: [c, d],
    } = await goodbyeJoinCrash(swarm);
    const commits = coordinator.liveCommits();
    auditCommits(job, commits);
    // The goodbye and the crash were inside outer steps: those steps were committed without the lost
    // rank (its slices left as holes, served later), so the job took more steps than planned.
    expect(commits.filter((row) => row.skipped).length).toBe(2);
    expect(commits.at(-1)!.step).toBeGreaterThan(TOTAL_STEPS);
    // Nothing was redone: no commit was ever rolled back, and no step was reported twice.
    expect(coordinator.commits.filter((row) => row.rolledBack)).toEqual([]);
    // The survivors hold the last committed state, hash-agreed.
    for (const t of [c, d]) expect(await t.trainer.hash()).toBe(commits.at(-1)!.hash);
    // After the crash the survivors carried the outer step in flight on, keeping their inner state.
    expect(d.loop.status.lastSync).toBe('carry');
  });

  it('a coordinator restart inside an outer step: the outer step in flight is redone, nothing twice', {
    timeout: 30_000,
  }, async () => {
    const job = parseJobSpec({ ...BASE, minWorkers: 2 });
    const ref = await handReference(job, 2);
    const { coordinator, open, committed, waitFor } = setUp(job);
    const [a, b] = [open('a', 2), open('b', 2)];
    await waitFor(
      () => committed() >= 4 && coordinator.state.rendezvous.participants.every((p) => p.lastStep >= committed() + 2),
      'two inner steps into the second outer step',
    );
    coordinator.kill();
    await waitFor(() => [a, b].every((t) => t.loop.status.phase === 'connecting'), 'the tabs to notice');
    coordinator.restart();
    await waitFor(() => coordinator.state.status === 'done', 'the job to finish after the restart');
    const commits = coordinator.liveCommits();
    auditCommits(job, commits);
    expect(commits.map((c) => c.step)).toEqual(OUTER_ENDS);
    // The outer step committed before the restart is the reference's; after it the shares are measured
    // anew (local mode's result depends on them: reported, not promised), so only agreement is checked.
    expect(commits[0].hash).toBe(ref.get(4));
    for (const t of [a, b]) expect(await t.trainer.hash()).toBe(commits.at(-1)!.hash);
    // Nothing of the outer step in flight was committed before the restart.
    expect(coordinator.commits.filter((r) => r.rolledBack)).toEqual([]);
  });
});
