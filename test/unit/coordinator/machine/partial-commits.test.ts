/**
 * Partial outer commits in local sync mode at N = 64, through the product executor (the harness checks
 * every invariant after every event, among them: each index committed at most once per epoch, and the
 * current epoch's committed positions plus the record's holes are exactly [0, cursor)). A member lost
 * inside an outer step — goodbye, crash, hang, a failure report blaming it, a loss during the outer
 * allreduce, a second loss while the group is carried — costs only its slices: they are exactly the
 * commit's skipped positions and the record's holes, the commit's samples are the survivors' slices,
 * and the next group serves the holes first. A join inside the outer step waits for the commit; a
 * coordinator restart inside it redoes the group, holes and all kept.
 *
 * The lost slices are computed here from the step-number layout of a run without holes
 * (test/support/hole-free-layout.ts) and the shares the round announced, independently of the group plan.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_TRUST_POLICY, restoreState } from '../../../../coordinator/machine/machine';
import { mergeRanges, rangesCount, type PositionRange } from '../../../../core/training/groups';
import type { JobSpecInput } from '../../../../core/training/job';
import { outerRetryAllowanceMs } from '../../../../coordinator/machine/outer-loss';
import { hangAllowanceMs } from '../../../../core/training/hang';
import { workerOf } from '../../../../coordinator/machine/worker-table';
import { Harness } from './coordinator-harness';
import { groupTestJob, reportThrough, shares, slices } from './group-kit';

const N = 64;
const H = 4;
const BATCH = 256;
/** Three outer steps of four steps of 256 per epoch, two epochs. */
const DATASET = BATCH * H * 3;
const JOB: JobSpecInput = groupTestJob(
  BATCH,
  N,
  { innerSteps: H },
  // Rings in groups where the planner finds them cheaper (opt-in, core/training/job.ts): these tests cover both.
  { topology: 'auto' },
);
/** The hang floor of these tests (the product's is 3 s): judged hung after max(floor, 2 × learned step). */
const HANG_FLOOR_MS = 200;

/** 64 members and every invariant after every event: seconds per test on a loaded machine. */
const SLOW = { timeout: 120_000 };

const name = (i: number) => `t${String(i).padStart(2, '0')}`;

/** 64 tabs in one round, ready, having committed the first outer step (steps 1..4, 1 ms between reports). */
function swarm(): Harness {
  const h = new Harness(JOB, DATASET, 'run-1', { ...DEFAULT_TRUST_POLICY, hangFloorMs: HANG_FLOOR_MS });
  for (let i = 0; i < N; i++) h.join(name(i));
  expect(h.members()).toHaveLength(N);
  h.readyAll();
  reportThrough(h, H);
  expect(h.state.lastCommit.step).toBe(H);
  return h;
}

/** The round the survivors carry the group on in, and its members. */
function carriedRound(h: Harness, lost: string[]) {
  const round = h.worker(h.members()[0]).round!;
  expect(round.carry, 'the next round carries the group on').toBeDefined();
  expect(h.members()).toHaveLength(N - lost.length);
  for (const n of lost) expect(h.members()).not.toContain(n);
  return round;
}

/**
 * A round in groups (64 members: 8 groups of 8, core/training/topology.ts) lost `lost` while every
 * survivor was at its outer sync: the round goes on without them (coordinator/machine/outer-loss.ts).
 * No new round; they are no members any more and their ranks of this round are vacant. Returns those ranks.
 */
function deferredLoss(h: Harness, lost: string[], ranks: number[]): number[] {
  expect(h.state.rendezvous.topology, 'the round syncs in groups').toEqual([8, 8, 8, 8, 8, 8, 8, 8]);
  expect(h.state.rendezvous.outerLoss?.ranks).toEqual(ranks);
  expect(h.worker(h.members()[0]).round!.round).toBe(h.state.rendezvous.round);
  for (const n of lost) expect(h.members()).not.toContain(n);
  return ranks;
}

/** `who`'s collective failed: its failure report, blaming `peer` if given. */
function reportFailure(h: Harness, who: string, reason: string, peer?: string): void {
  const w = h.worker(who);
  h.send(who, {
    type: 'failure',
    runId: h.runId,
    workerId: w.workerId!,
    round: w.round!.round,
    reason,
    ...(peer !== undefined ? { peer } : {}),
  });
}

/** The survivors report the commit point naming `excluded` as left out of the outer sum (the grouped allreduce's outcome). */
function reportWithout(h: Harness, excluded: number[]): void {
  for (const member of h.members()) {
    if (h.state.rendezvous.phase !== 'training') break;
    h.now += 1;
    h.report(member, { excluded });
  }
}

/** After a commit without vacant ranks the round closed at that commit boundary: a new one, ready, trains on. */
function expectNewRound(h: Harness, old: number): void {
  expect(h.state.rendezvous.round).toBeGreaterThan(old);
  expect(h.state.rendezvous.outerLoss ?? null).toBeNull();
  h.readyAll();
  expect(h.state.rendezvous.phase).toBe('training');
}

/** Checks on the commit of a group carried on without `lostRanks` of the planning round (`split`). */
function expectPartialCommit(h: Harness, first: number, split: number[], lostRanks: number[]): PositionRange[] {
  reportThrough(h, first + H - 1);
  const last = h.commits.at(-1)!;
  expect(last.step).toBe(first + H - 1);
  const lost = mergeRanges(lostRanks.flatMap((r) => slices(h, first, last.step, split, r)));
  const kept = split.flatMap((_, r) => (lostRanks.includes(r) ? [] : slices(h, first, last.step, split, r)));
  // The lost ranks' slices are exactly what the commit skipped and what the record now holds as holes.
  expect(last.skipped).toEqual(lost);
  expect(h.state.record.holes).toEqual(lost);
  // The commit's samples are the survivors' slices.
  expect(last.count).toBe(rangesCount(kept));
  expect(mergeRanges(last.ranges!)).toEqual(mergeRanges(kept));
  // Nothing was redone: no commit was rolled back.
  expect(h.logs.some((l) => l.event === 'record_rolled_back')).toBe(false);
  return lost;
}

/** The next group serves the holes first: its commit covers them all, and none are left. */
function expectHolesServed(h: Harness, holes: PositionRange[]): void {
  const before = h.commits.length;
  reportThrough(h, h.state.lastCommit.step + H);
  const next = h.commits[before];
  expect(next, 'the next group committed').toBeDefined();
  const covered = mergeRanges(next.ranges ?? [[next.cursorStart, next.cursorStart + next.count]]);
  for (const [start, end] of holes) expect(covered.some(([a, b]) => a <= start && end <= b)).toBe(true);
  // The holes come first: the group's first step starts at the first hole.
  expect(covered[0][0]).toBe(holes[0][0]);
  expect(h.state.record.holes).toEqual([]);
}

/** Runs the job to its end (two survivors' worth of checks are in the harness) and checks every epoch is whole. */
function expectJobCompletes(h: Harness): void {
  for (let guard = 0; h.state.status !== 'done' && guard < 200; guard++) {
    if (h.state.rendezvous.phase === 'syncing') h.readyAll();
    else if (h.state.rendezvous.phase === 'training') reportThrough(h, h.state.lastCommit.step + H);
    else h.advance(1000);
  }
  expect(h.state.status).toBe('done');
  for (const epoch of [0, 1])
    expect(h.commits.filter((c) => c.epoch === epoch).reduce((a, c) => a + c.count, 0)).toBe(DATASET);
}

describe(`partial outer commits at N = ${N} (local sync mode, machine through the executor)`, () => {
  it(
    'a goodbye inside an outer step costs only the leaver’s slices; no restart, the holes are served next',
    SLOW,
    () => {
      const h = swarm();
      reportThrough(h, H + 2);
      const split = shares(h);
      const leaver = name(17);
      h.send(leaver, { type: 'goodbye', runId: h.runId, workerId: h.worker(leaver).workerId! });
      const round = carriedRound(h, [leaver]);
      // Every survivor goes on from its slot and its reports: the coordinator has steps up to 6 of each.
      expect(round.carry!.slots).toEqual(split.map((_, r) => r).filter((r) => r !== 17));
      expect(round.carry!.reported).toEqual(new Array(N - 1).fill(H + 2));
      h.readyAll();
      const holes = expectPartialCommit(h, H + 1, split, [17]);
      expect(h.state.restarts).toBe(0);
      expectHolesServed(h, holes);
      expectJobCompletes(h);
    },
  );

  it(
    'a goodbye before anyone reported a step of the group is not carried: the group is redone, and the close says it cost 0 steps',
    SLOW,
    () => {
      const h = swarm();
      const leaver = name(17);
      h.send(leaver, { type: 'goodbye', runId: h.runId, workerId: h.worker(leaver).workerId! });
      const close = h.logs.filter((l) => l.event === 'round_closed').at(-1)!;
      expect(close.data.carry).toBeUndefined();
      expect(close.data.redoneSteps).toBe(0);
      expect(h.worker(h.members()[0]).round!.carry).toBeUndefined();
      expect(h.state.record.holes).toEqual([]);
      // Inside the group, a goodbye is carried: nothing is redone, and the close does not say so.
      h.readyAll();
      reportThrough(h, H + 2);
      h.send(name(18), { type: 'goodbye', runId: h.runId, workerId: h.worker(name(18)).workerId! });
      const carried = h.logs.filter((l) => l.event === 'round_closed').at(-1)!;
      expect(carried.data.carry).toBeDefined();
      expect(carried.data.redoneSteps).toBeUndefined();
    },
  );

  it(
    'in a carried round a report must have its slot’s samples, and the commit point waits for every survivor',
    SLOW,
    () => {
      const h = swarm();
      reportThrough(h, H + 1);
      h.disconnect(name(0));
      carriedRound(h, [name(0)]);
      h.readyAll();
      // t01 is rank 0 now but computes slot 1's slices; its report of step 6 with another count is refused.
      const before = h.state;
      h.report(name(1), { samples: 999 });
      expect(h.state).toBe(before);
      expect(h.lastReceived(name(1))).toMatchObject({ type: 'error', code: 'bad_samples' });
      // Everyone but one survivor reports the whole group: no commit yet.
      reportThrough(h, 2 * H, [name(63)]);
      expect(h.state.lastCommit.step).toBe(H);
      reportThrough(h, 2 * H);
      expect(h.state.lastCommit.step).toBe(2 * H);
    },
  );

  it('a crash inside an outer step counts a restart and costs only the crashed rank’s slices', SLOW, () => {
    const h = swarm();
    reportThrough(h, H + 1);
    const split = shares(h);
    h.disconnect(name(40));
    carriedRound(h, [name(40)]);
    expect(h.state.restarts).toBe(1);
    h.readyAll();
    const holes = expectPartialCommit(h, H + 1, split, [40]);
    expectHolesServed(h, holes);
    expectJobCompletes(h);
  });

  it(
    'a hung tab (no inner step for twice its learned step time and the floor) is closed and costs only its slices',
    SLOW,
    () => {
      const h = swarm();
      const split = shares(h);
      const hung = name(5);
      // The others go on to their last inner step; the hung tab stops after step 5 (heartbeats do not save it).
      reportThrough(h, H + 1);
      reportThrough(h, 2 * H - 1, [hung]);
      h.send(hung, { type: 'heartbeat', runId: h.runId, workerId: h.worker(hung).workerId! });
      expect(h.members()).toContain(hung);
      h.advance(HANG_FLOOR_MS + 10);
      expect(h.logs.some((l) => l.event === 'member_hung' && l.data.workerId === h.worker(hung).workerId)).toBe(true);
      // Its socket was closed by the coordinator (close code `noProgress`), and it is no member any more;
      // every other member is at the round's outer sync, which goes on without it.
      expect(h.worker(hung).closedByServer).toBe(true);
      deferredLoss(h, [hung], [5]);
      const round = h.state.rendezvous.round;
      reportWithout(h, [5]);
      const holes = expectPartialCommit(h, H + 1, split, [5]);
      expectNewRound(h, round);
      expectHolesServed(h, holes);
    },
  );

  it('a slow tab is not judged hung before the floor, however fast it was', SLOW, () => {
    const h = swarm();
    // The others reach their last inner step (the next report waits for the outer sync: not judged).
    reportThrough(h, H + 1);
    reportThrough(h, 2 * H - 1, [name(9)]);
    // t09 learned about 64 ms a step; its next two steps take 180 ms each: slow, but under the floor.
    for (let step = H + 2; step <= 2 * H - 1; step++) {
      h.now += 1;
      h.report(name(9));
      h.advance(HANG_FLOOR_MS - 20);
      expect(h.members()).toHaveLength(N);
    }
    expect(h.logs.some((l) => l.event === 'member_hung')).toBe(false);
    reportThrough(h, 2 * H);
    expect(h.state.lastCommit.step).toBe(2 * H);
    expect(h.commits.at(-1)!.skipped).toBeUndefined();
  });

  it('a tab whose steps jitter gets its jitter’s room (TCP’s RTO rule), then is judged hung past it', SLOW, () => {
    const h = swarm();
    const jittery = name(9);
    // Three outer steps whose inner steps take 10 and 180 ms by turns (under the floor of 200 ms: a process starved now and then).
    for (let group = 2; group <= 4; group++) {
      const first = (group - 1) * H + 1;
      reportThrough(h, first - 1);
      for (let step = first; step < group * H; step++) {
        h.advance(step % 2 === 0 ? 10 : 180);
        reportThrough(h, step);
      }
      reportThrough(h, group * H);
      expect(h.state.lastCommit.step).toBe(group * H);
    }
    expect(h.members()).toContain(jittery);
    reportThrough(h, 4 * H + 1);
    // What the coordinator learned of t09 by its last report: its time for the next step, and its jitter.
    const id = h.worker(jittery).workerId!;
    const lastReport = h.state.rendezvous.participants.find((p) => p.workerId === id)!.lastReportAt!;
    const worker = workerOf(h.state.workers, id)!;
    const learned = h.sliceOf(h.worker(jittery), 4 * H + 2) / worker.throughput!;
    const allowance = hangAllowanceMs(learned, HANG_FLOOR_MS, worker.stepDeviationMs!)!;
    // Its jitter, not the floor or twice its mean, sets its room: the rule without deviations would have dropped it sooner.
    expect(allowance).toBeGreaterThan(Math.max(HANG_FLOOR_MS, 2 * learned) + 100);
    reportThrough(h, 5 * H - 1, [jittery]);
    h.advance(lastReport + allowance - 50 - h.now);
    expect(h.members()).toContain(jittery);
    expect(h.logs.some((l) => l.event === 'member_hung')).toBe(false);
    h.advance(100);
    expect(h.logs.some((l) => l.event === 'member_hung' && l.data.workerId === id)).toBe(true);
  });

  it('a failure report blaming a peer loses the peer, not the reporter', SLOW, () => {
    const h = swarm();
    reportThrough(h, 2 * H - 1);
    const split = shares(h);
    reportFailure(h, name(12), 'timeout: t11 sent nothing for 3000 ms (hung)', h.worker(name(11)).workerId!);
    // Every member is at the outer sync: it goes on without the blamed tab.
    deferredLoss(h, [name(11)], [11]);
    expect(h.members()).toContain(name(12));
    // The blamed tab is still connected: it heard its round is over and waits (and is not admitted
    // while its restart is on probation).
    const round = h.worker(name(12)).round!.round;
    expect(h.worker(name(11)).inbox).toContainEqual(expect.objectContaining({ type: 'round_closed', round }));
    expect(h.state.rendezvous.waitList).toContain(h.worker(name(11)).workerId);
    reportWithout(h, [11]);
    const holes = expectPartialCommit(h, H + 1, split, [11]);
    expectNewRound(h, round);
    expectHolesServed(h, holes);
  });

  it(
    'a loss during the outer allreduce (some ranks reported the commit point already) costs only that rank',
    SLOW,
    () => {
      const h = swarm();
      reportThrough(h, 2 * H - 1);
      const split = shares(h);
      // Ranks 0..29 finished the outer step with the old world and reported it; then rank 50 drops.
      for (let i = 0; i < 30; i++) h.report(name(i));
      expect(h.state.lastCommit.step).toBe(H);
      h.disconnect(name(50));
      const round = carriedRound(h, [name(50)]);
      // Their commit-point reports carried the old world's sum: they report it again.
      expect(Math.max(...round.carry!.reported)).toBe(2 * H - 1);
      h.readyAll();
      const holes = expectPartialCommit(h, H + 1, split, [50]);
      expectHolesServed(h, holes);
    },
  );

  it('a second loss while the group is carried on adds its slices to the holes', SLOW, () => {
    const h = swarm();
    reportThrough(h, H + 2);
    const split = shares(h);
    h.disconnect(name(3));
    carriedRound(h, [name(3)]);
    h.readyAll();
    // t60 leaves while the others still have inner steps to take (at their outer sync, the round would
    // go on without it instead: see the hung tab).
    reportThrough(h, H + 3, [name(60), name(61)]);
    h.send(name(60), { type: 'goodbye', runId: h.runId, workerId: h.worker(name(60)).workerId! });
    const round = carriedRound(h, [name(3), name(60)]);
    // The split is still the planning round's: slots, not the new ranks.
    expect(round.carry!.shares).toEqual(split);
    expect(round.carry!.slots).not.toContain(3);
    expect(round.carry!.slots).not.toContain(60);
    h.readyAll();
    const holes = expectPartialCommit(h, H + 1, split, [3, 60]);
    expectHolesServed(h, holes);
    expectJobCompletes(h);
  });

  it('a tab joining inside a carried outer step waits for its commit, then helps serve the holes', SLOW, () => {
    const h = swarm();
    reportThrough(h, H + 1);
    const split = shares(h);
    h.disconnect(name(20));
    carriedRound(h, [name(20)]);
    h.join('newcomer');
    expect(h.members()).not.toContain('newcomer');
    expect(h.lastReceived('newcomer')).toMatchObject({ type: 'wait', reason: 'round_running' });
    h.readyAll();
    const holes = expectPartialCommit(h, H + 1, split, [20]);
    // Admitted at the commit: a new round of 64 with the newcomer serves the holes.
    expect(h.members()).toContain('newcomer');
    expect(h.members()).toHaveLength(N);
    h.readyAll();
    expectHolesServed(h, holes);
    expectJobCompletes(h);
  });

  it(
    'a checkpoint of a partial commit keeps its holes: when every tab is gone, the rollback restores them',
    SLOW,
    () => {
      const h = swarm();
      reportThrough(h, H + 1);
      const split = shares(h);
      h.disconnect(name(8));
      carriedRound(h, [name(8)]);
      h.readyAll();
      const holes = expectPartialCommit(h, H + 1, split, [8]);
      // A checkpoint of that commit, stored where the tabs were told the record stands.
      h.apply({ kind: 'admin', action: { type: 'checkpoint_now' } });
      const at = h.positionAfter(2 * H)!;
      h.apply({ kind: 'checkpoint_stored', step: 2 * H, epoch: at.epoch, cursor: at.cursor, sha256: 'cd'.repeat(32) });
      expect(h.state.checkpoints.at(-1)).toMatchObject({ step: 2 * H, holes });
      // The next outer step serves the holes and commits; then every tab is gone before a checkpoint of it.
      reportThrough(h, 3 * H);
      expect(h.state.record.holes).toEqual([]);
      // (Goodbyes: 63 crashes from one address would cool it off, penalties.ts.)
      for (const member of h.members())
        h.send(member, { type: 'goodbye', runId: h.runId, workerId: h.worker(member).workerId! });
      h.join('fresh', { fresh: true });
      h.advance(1000);
      // Nobody holds the last commit: the record rolls back to the checkpoint, holes and all.
      expect(h.state.lastCommit.step).toBe(2 * H);
      expect(h.state.record.holes).toEqual(holes);
      expect(h.worker('fresh').round!.holes).toEqual(holes);
      h.readyAll();
      expectHolesServed(h, holes);
    },
  );

  it(
    'a coordinator restart inside an outer step redoes that group; holes of an earlier partial commit survive it',
    SLOW,
    () => {
      const h = swarm();
      reportThrough(h, H + 1);
      const split = shares(h);
      h.disconnect(name(33));
      carriedRound(h, [name(33)]);
      h.readyAll();
      const holes = expectPartialCommit(h, H + 1, split, [33]);
      // Inside the next group (which serves the holes), the coordinator dies and comes back.
      reportThrough(h, 2 * H + 2);
      const durable = JSON.parse(JSON.stringify(h.durable));
      expect(durable.record.holes).toEqual(holes);
      h.restart(restoreState(durable));
      expect(h.state.record.holes).toEqual(holes);
      expect(h.state.lastCommit.step).toBe(2 * H);
      for (let i = 0; i < N; i++) if (i !== 33) h.join(name(i));
      h.advance(1000);
      expect(h.members()).toHaveLength(N - 1);
      // A fresh round: nothing carried, the group in flight is redone from the record, holes first.
      expect(h.worker(h.members()[0]).round!.carry).toBeUndefined();
      h.readyAll();
      expectHolesServed(h, holes);
      expectJobCompletes(h);
    },
  );
});

describe(`a grouped outer sync that goes on without lost members (N = ${N}, outer-loss.ts)`, () => {
  it('a crash at the outer sync: the survivors’ reports name its rank and the group commits without it', SLOW, () => {
    const h = swarm();
    reportThrough(h, 2 * H - 1);
    const split = shares(h);
    const round = h.state.rendezvous.round;
    h.disconnect(name(40));
    deferredLoss(h, [name(40)], [40]);
    expect(h.state.restarts).toBe(1);
    // Every survivor hears at once which rank is gone (its links may stay open for 30 s).
    for (const member of h.members())
      expect(h.received(member, 'members_lost'), member).toEqual([
        expect.objectContaining({ type: 'members_lost', round, ranks: [40] }),
      ]);
    // A report that does not name the rank is not counted yet; every survivor's does.
    reportWithout(h, [40]);
    const holes = expectPartialCommit(h, H + 1, split, [40]);
    expectNewRound(h, round);
    expectHolesServed(h, holes);
    expectJobCompletes(h);
  });

  it(
    'a report naming a rank the coordinator still counts as a member starts the wait (a tab its group judged hung)',
    SLOW,
    () => {
      const h = swarm();
      reportThrough(h, 2 * H - 1);
      const split = shares(h);
      const round = h.state.rendezvous.round;
      h.now += 1;
      h.report(name(0), { excluded: [20] });
      deferredLoss(h, [name(20)], [20]);
      // Still connected: it hears its round is over and waits.
      expect(h.worker(name(20)).inbox).toContainEqual(expect.objectContaining({ type: 'round_closed', round }));
      expect(h.state.rendezvous.waitList).toContain(h.worker(name(20)).workerId);
      reportWithout(h, [20]);
      const holes = expectPartialCommit(h, H + 1, split, [20]);
      expectNewRound(h, round);
      expectHolesServed(h, holes);
    },
  );

  it('survivors that disagree on who was left out take the outer step again in a carried round', SLOW, () => {
    const h = swarm();
    reportThrough(h, 2 * H - 1);
    const split = shares(h);
    h.disconnect(name(9));
    deferredLoss(h, [name(9)], [9]);
    h.now += 1;
    h.report(name(1), { excluded: [9] });
    h.now += 1;
    h.report(name(2), { excluded: [] });
    expect(h.logs.some((l) => l.event === 'outer_loss_mismatch')).toBe(true);
    const carried = carriedRound(h, [name(9)]);
    expect(carried.carry!.slots).not.toContain(9);
    h.readyAll();
    const holes = expectPartialCommit(h, H + 1, split, [9]);
    expectHolesServed(h, holes);
  });

  it(
    'a tab that names a member its mates did not leave out is charged for the restart when they disagree',
    SLOW,
    () => {
      const h = swarm();
      reportThrough(h, 2 * H - 1);
      const split = shares(h);
      const liar = h.worker(name(0)).workerId!;
      h.now += 1;
      h.report(name(0), { excluded: [20] });
      deferredLoss(h, [name(20)], [20]);
      // The coordinator does not pass the claim on as its own: nobody hears `members_lost`.
      for (const member of h.members()) expect(h.received(member, 'members_lost'), member).toEqual([]);
      // Its mates' grouped allreduce left nobody out: their reports name nobody.
      h.now += 1;
      h.report(name(1), { excluded: [] });
      expect(h.logs.some((l) => l.event === 'outer_loss_mismatch')).toBe(true);
      expect(h.logs.filter((l) => l.event === 'charged').map((l) => l.data.workerId)).toEqual([liar]);
      carriedRound(h, [name(20)]);
      h.readyAll();
      const holes = expectPartialCommit(h, H + 1, split, [20]);
      // The member pushed out was still connected: it is admitted again at that commit.
      expect(h.members()).toContain(name(20));
      h.readyAll();
      expectHolesServed(h, holes);
    },
  );

  it(
    'a survivor whose grouped call failed during the wait, naming nobody, ends it at once: the survivors carry the group on, the reporter with them and not charged',
    SLOW,
    () => {
      const h = swarm();
      reportThrough(h, 2 * H - 1);
      const split = shares(h);
      h.disconnect(name(30));
      deferredLoss(h, [name(30)], [30]);
      expect(h.state.restarts).toBe(1);
      const reporter = h.worker(name(31));
      reportFailure(h, name(31), 'protocol: group allreduce 2.16.0: the group retried after it sealed');
      expect(h.logs.some((l) => l.event === 'outer_loss_failed')).toBe(true);
      expect(h.logs.some((l) => l.event === 'worker_failed' && l.data.workerId === reporter.workerId)).toBe(false);
      expect(h.state.restarts, 'the loss counted once, the report not at all').toBe(1);
      carriedRound(h, [name(30)]);
      expect(h.members()).toContain(name(31));
      h.readyAll();
      const holes = expectPartialCommit(h, H + 1, split, [30]);
      expectHolesServed(h, holes);
    },
  );

  it('survivors that do not report by the deadline carry the group on as before', SLOW, () => {
    const h = swarm();
    reportThrough(h, 2 * H - 1);
    const split = shares(h);
    h.disconnect(name(30));
    deferredLoss(h, [name(30)], [30]);
    h.advance(outerRetryAllowanceMs(h.state) + 1);
    expect(h.logs.some((l) => l.event === 'outer_loss_expired')).toBe(true);
    carriedRound(h, [name(30)]);
    h.readyAll();
    const holes = expectPartialCommit(h, H + 1, split, [30]);
    expectHolesServed(h, holes);
  });

  it(
    'only a local-mode commit point may name left-out ranks: an inner step’s report that does is refused',
    SLOW,
    () => {
      const h = swarm();
      reportThrough(h, H + 1);
      const before = h.state;
      h.report(name(3), { excluded: [7] });
      expect(h.state).toBe(before);
      expect(h.lastReceived(name(3))).toMatchObject({ type: 'error', code: 'bad_message' });
    },
  );
});
