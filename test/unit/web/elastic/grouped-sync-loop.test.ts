/**
 * Outer syncs in groups with whole simulated tabs (test/kit/simulation.ts: the real elastic loop, the
 * real coordinator machine through the product executor, in-memory links, CPU trainers), local sync
 * mode, 9 tabs: with no RTT measured the coordinator plans 3 groups of 3 (core/training/topology.ts) and
 * the tabs take their outer steps with the grouped allreduce (web/net/group-allreduce.ts). Without
 * churn every commit is hash-agreed and the record is exactly-once. A tab that crashes inside the outer
 * sync costs only its group a retry: the round is not closed (nobody else takes the outer step again),
 * the group is committed without exactly the crashed tab's slices (computed here from the hole-free
 * step layout and the round's shares), the survivors hold the committed state bit for bit, and the next
 * group serves the holes. In every-step mode each step's gradient sums go through the grouped allreduce
 * too; a crash fails the step for everyone (a fixed global batch has no partial steps), as in the ring.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { planOf, type PositionRange } from '../../../../core/training/groups';
import { parseJobSpec, type JobSpec } from '../../../../core/training/job';
import { groupPartners } from '../../../../core/training/group-geometry';
import { parameterLayout } from '../../../../core/training/model-spec';
import { auditCommitRows, unservedHoles, SIM_MODEL, swarmPastFirstOuter, type SimTab } from '../../../kit/simulation';
import { referenceRankRanges } from '../../../support/hole-free-layout';

const N = 9;
const H = 6;
/** Samples per rank per step. */
const PER_RANK = 4;
/** Three outer steps per epoch, two epochs. */
const DATASET = N * PER_RANK * H * 3;

const LOCAL = {
  mode: 'local',
  innerSteps: H,
  outer: { kind: 'nesterov', lr: 0.7, momentum: 0.9 },
  compression: 'none',
};

function job(sync: Record<string, unknown> = LOCAL): JobSpec {
  return parseJobSpec({
    model: SIM_MODEL,
    topology: 'auto',
    optimizer: { kind: 'sgd', lr: 0.1, momentum: 0.5 },
    globalBatch: N * PER_RANK,
    epochs: 2,
    minWorkers: 1,
    maxWorkers: N,
    checkpointEvery: 1000,
    // Losses are seen by closed sockets and links: a slow heartbeat keeps a loaded machine from
    // declaring live tabs dead.
    heartbeatMs: 2000,
    lastCallMs: 300,
    evalSamples: 0,
    seed: 11,
    sync,
  });
}

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

/** 9 tabs in one round in groups, past the first outer step. The hang floor is 1 s on both sides. */
async function swarm(spec = job()) {
  const s = await swarmPastFirstOuter(spec, DATASET, {
    runId: 'sim-grouped',
    n: N,
    innerSteps: H,
    hangFloorMs: 1000,
    cleanup: (stop) => cleanups.push(stop),
  });
  expect(s.coordinator.state.rendezvous.topology, 'the round syncs in 3 groups of 3').toEqual([3, 3, 3]);
  return { ...s, spec };
}

type Swarm = Awaited<ReturnType<typeof swarm>>;

/** The tab of rank `rank` in the open round. */
function tabAt(s: Swarm, rank: number): SimTab {
  const id = s.coordinator.state.rendezvous.participants[rank].workerId;
  return s.tabs.find((t) => t.loop.status.workerId === id)!;
}

/** The positions `rank` computes in the group `first..first+H-1` of an epoch without holes before it. */
function lostSlices(s: Swarm, first: number, shares: number[], rank: number): PositionRange[] {
  return referenceRankRanges(first, first + H - 1, planOf(s.coordinator.state), shares, rank);
}

/** The job ends; the record is exactly-once; every survivor holds the last commit's state bit for bit. */
async function expectCleanEnd(s: Swarm, gone: SimTab[]): Promise<void> {
  await s.waitFor(() => s.coordinator.state.status === 'done', 'the job to finish', 60_000);
  const survivors = s.tabs.filter((t) => !gone.includes(t));
  await s.waitFor(() => survivors.every((t) => t.loop.status.phase === 'done'), 'the survivors to see done', 30_000);
  const commits = s.coordinator.liveCommits();
  expect(auditCommitRows(commits, { seed: s.spec.seed, datasetSize: DATASET, epochs: 2, done: true })).toEqual({
    twice: [],
    missing: [],
  });
  for (const t of survivors)
    expect(await t.trainer.hash(), `${t.name} holds the last commit`).toBe(commits.at(-1)!.hash);
}

const SLOW = { timeout: 120_000 };

describe('outer syncs in groups with simulated tabs (local sync mode, 9 tabs, 3 groups of 3)', () => {
  it('every outer step runs the grouped allreduce and every commit is hash-agreed', SLOW, async () => {
    const s = await swarm();
    // Links exist between partners across groups, which a plain ring never connects.
    const world = s.coordinator.state.rendezvous.participants.map((p) => tabAt(s, p.rank).peerId);
    const n = parameterLayout(s.spec.model).totalElements;
    const { cross } = groupPartners({ sizes: [3, 3, 3] }, n, 0);
    expect(cross.length).toBeGreaterThan(0);
    for (const r of cross) expect(s.network.openLink(world[0], world[r]), `rank 0 ↔ rank ${r}`).not.toBeNull();
    await expectCleanEnd(s, []);
    expect(s.coordinator.commits.filter((c) => c.rolledBack)).toEqual([]);
    expect(s.coordinator.commits.some((c) => c.skipped)).toBe(false);
    expect(s.coordinator.state.restarts).toBe(0);
  });

  it(
    'a crash inside one group’s outer sync costs only that group a retry and only the crashed tab’s share',
    SLOW,
    async () => {
      const s = await swarm();
      const rv = () => s.coordinator.state.rendezvous;
      const round = rv().round;
      const first = s.committed() + 1;
      const shares = rv().participants.map((p) => p.share);
      // Rank 4 (the middle of group 1) stops in its pseudo-gradient: everyone else reaches the outer sync
      // and waits inside the grouped allreduce (its mates for its reduce frames, the others for group 1's pieces).
      const victim = tabAt(s, 4);
      victim.trainer.hang('outer');
      await s.waitFor(
        () => rv().participants.every((p) => p.rank === 4 || p.lastStep === first + H - 2),
        'every other tab at its outer sync',
        30_000,
      );
      await s.waitFor(() => victim.trainer.calls.includes('hung:outer'), 'the victim hung in its outer step');
      victim.crash({ peersHearRemoteClose: true });
      await s.waitFor(() => s.committed() >= first + H - 1, 'the group committed without the crashed tab', 30_000);
      // The round went on: it closed (if at all yet) only at the commit boundary, with nothing to carry.
      const closes = s.coordinator.log.filter((l) => l.event === 'round_closed' && l.data.round === round);
      expect(closes.map((l) => [l.data.reason, l.data.carry ?? null])).toEqual(closes.map(() => ['membership', null]));
      expect(s.coordinator.log.some((l) => l.event === 'outer_loss_deferred')).toBe(true);
      expect(s.coordinator.log.some((l) => l.event === 'outer_loss_mismatch' || l.event === 'outer_loss_expired')).toBe(
        false,
      );
      const commits = s.coordinator.liveCommits();
      const partial = commits.find((c) => c.firstStep === first)!;
      const lost = lostSlices(s, first, shares, 4);
      expect(partial.skipped).toEqual(lost);
      const survivors = s.tabs.filter((t) => t !== victim);
      await expectCleanEnd(s, [victim]);
      // Every survivor kept its inner steps and took the outer step once, and none stepped past the
      // commit (the round closes there: its ranks no longer fit its members), so none put anything back.
      for (const t of survivors) expect(t.loop.status.restores, `${t.name} restored nothing`).toBe(0);
      // The next group served the holes.
      expect(
        unservedHoles(s.coordinator.liveCommits().find((c) => c.firstStep === partial.step + 1)!, lost),
        'holes the next group did not serve',
      ).toEqual([]);
    },
  );
});

describe('every-step sync in groups with simulated tabs (9 tabs, 3 groups of 3)', () => {
  const everyStep = () => job({ mode: 'every-step', compression: 'none' });

  it(
    'sums every step’s gradients in groups; every commit is hash-agreed and the record exactly-once',
    SLOW,
    async () => {
      const s = await swarm(everyStep());
      await expectCleanEnd(s, []);
      expect(s.coordinator.state.restarts).toBe(0);
    },
  );

  it(
    'a crash fails the step in flight everywhere (this mode has no partial steps); the others redo it in a new round and agree',
    SLOW,
    async () => {
      const s = await swarm(everyStep());
      const victim = tabAt(s, 7);
      const before = s.committed();
      victim.crash({ peersHearRemoteClose: true });
      await s.waitFor(() => s.committed() >= before + 3, 'survivors training on', 30_000);
      await expectCleanEnd(s, [victim]);
      expect(s.coordinator.liveCommits().some((c) => c.skipped)).toBe(false);
    },
  );
});
