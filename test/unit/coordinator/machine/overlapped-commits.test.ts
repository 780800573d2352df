/**
 * Overlapped outer steps (local sync mode with `sync.overlap`, core/training/overlap.ts) at N = 16
 * through the product executor, every invariant checked after every event (coordinator-harness.ts:
 * each index committed at most once per epoch, the current epoch's committed positions plus the
 * record's holes exactly [0, cursor), every message valid, durable before announced). The workers plan
 * their slices with the tabs' own planner.
 *
 * While an outer step's allreduce runs the members report the next group's inner steps; the group
 * commits on the last member's `outer_report`, whose hashes must agree. A member lost in there — goodbye,
 * crash, a hang in the next group — costs only its slices of both groups in flight: they are exactly
 * the two commits' skipped positions, and the group after serves them. A join waits for a drained
 * (synchronous) outer step; a coordinator restart redoes the groups in flight. Hostile outer reports
 * change nothing.
 *
 * The lost slices are computed here from the step-number layout of a run without holes
 * (test/support/hole-free-layout.ts) and the shares the round announced, independently of the group plan.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_TRUST_POLICY, restoreState } from '../../../../coordinator/machine/machine';
import { groupInFlight } from '../../../../coordinator/machine/group';
import { mergeRanges, rangesCount } from '../../../../core/training/groups';
import type { JobSpecInput } from '../../../../core/training/job';
import { Harness, hashOf } from './coordinator-harness';
import { groupTestJob, reportThrough, shares, slices } from './group-kit';

const N = 16;
const H = 4;
const BATCH = 64;
/** Three outer steps of four steps of 64 per epoch, two epochs: groups 1–4, 5–8 (both overlap), 9–12 (ends the epoch). */
const DATASET = BATCH * H * 3;
const JOB: JobSpecInput = groupTestJob(BATCH, N + 1, { innerSteps: H, overlap: true });
/** The hang floor of these tests (the product's is 3 s). */
const HANG_FLOOR_MS = 200;
const SLOW = { timeout: 120_000 };

const name = (i: number) => `t${String(i).padStart(2, '0')}`;

/** Every member (but `except`) sends its outer report of the group ending at `step`. */
function outerAll(h: Harness, step: number, except: string[] = []): void {
  for (const member of h.members()) if (!except.includes(member)) h.outer(member, step);
}

/** N tabs in one round that committed the first outer step (its allreduce overlapping steps 5 and 6). */
function swarm(): Harness {
  const h = new Harness(JOB, DATASET, 'run-1', { ...DEFAULT_TRUST_POLICY, hangFloorMs: HANG_FLOOR_MS });
  for (let i = 0; i < N; i++) h.join(name(i));
  // Room for one more (the join test): the round opens at the end of the last call.
  h.advance(1000);
  expect(h.members()).toHaveLength(N);
  h.readyAll();
  reportThrough(h, H + 2);
  expect(h.state.lastCommit.step).toBe(0);
  outerAll(h, H);
  expect(h.state.lastCommit.step).toBe(H);
  return h;
}

/** Commit the group in flight: every member reports its steps and its outer step. */
function commitNext(h: Harness): void {
  const point = groupInFlight(h.state).lastStep;
  reportThrough(h, point);
  outerAll(h, point);
  expect(h.state.lastCommit.step).toBe(point);
}

/** Runs the job to its end and checks every epoch is whole. */
function expectJobCompletes(h: Harness): void {
  for (let guard = 0; h.state.status !== 'done' && guard < 200; guard++) {
    if (h.state.rendezvous.phase === 'syncing') h.readyAll();
    else if (h.state.rendezvous.phase === 'training') commitNext(h);
    else h.advance(1000);
  }
  expect(h.state.status).toBe('done');
  for (const epoch of [0, 1])
    expect(h.commits.filter((c) => c.epoch === epoch).reduce((a, c) => a + c.count, 0)).toBe(DATASET);
}

/**
 * A member lost while the outer step of 5–8 is in flight and the next group runs: the survivors carry
 * both groups on; each commits exactly without the lost rank's slices, and the group after serves them.
 */
function expectBothGroupsCarried(h: Harness, split: number[], lostRank: number): void {
  const round = h.worker(h.members()[0]).round!;
  expect(round.carry?.through, 'both groups in flight are carried on').toBe(3 * H);
  expect(round.carry!.slots).not.toContain(lostRank);
  expect(h.members()).toHaveLength(N - 1);
  h.readyAll();
  // The outer step of 5–8 again, with the survivors (their reports of its steps stand).
  reportThrough(h, 2 * H);
  outerAll(h, 2 * H);
  const first = h.commits.at(-1)!;
  expect(first.step).toBe(2 * H);
  const lostFirst = slices(h, H + 1, 2 * H, split, lostRank);
  expect(first.skipped).toEqual(lostFirst);
  commitNext(h);
  const second = h.commits.at(-1)!;
  expect(second.step).toBe(3 * H);
  const lostSecond = slices(h, 2 * H + 1, 3 * H, split, lostRank);
  expect(second.skipped).toEqual(lostSecond);
  // The second group was planned before the first's partial commit: it left those holes alone.
  expect(h.state.record.holes).toEqual(mergeRanges([...lostFirst, ...lostSecond]));
  expect(h.logs.some((l) => l.event === 'record_rolled_back')).toBe(false);
  // The next epoch may not begin while its holes are open: the next group serves them all.
  const holes = h.state.record.holes;
  commitNext(h);
  const served = mergeRanges(h.commits.at(-1)!.ranges!);
  for (const [a, b] of holes) expect(served.some(([x, y]) => x <= a && b <= y)).toBe(true);
  expect(h.state.record.holes).toEqual([]);
}

describe(`overlapped outer steps at N = ${N} (machine through the executor)`, () => {
  it(
    'takes the next group’s inner steps during an outer step and commits on the last agreeing outer report',
    SLOW,
    () => {
      const h = swarm();
      // The group 5–8 and its successor's first two steps, before any outer report of 8.
      reportThrough(h, 2 * H + 2);
      expect(h.state.lastCommit.step).toBe(H);
      // Not past the successor: the group after it is planned only once 5–8 commits.
      const far = h.report(name(0), { step: 3 * H + 1 });
      expect(far.some((a) => a.kind === 'send' && a.msg.type === 'error' && a.msg.code === 'wrong_step')).toBe(true);
      outerAll(h, 2 * H, [name(15)]);
      expect(h.state.lastCommit.step).toBe(H);
      h.outer(name(15), 2 * H);
      expect(h.state.lastCommit.step).toBe(2 * H);
      expect(h.state.lastCommit.hash).toBe(hashOf(2 * H));
      // The successor's reports made before the commit count toward it.
      expect(h.state.pending[2 * H + 1]).toBeDefined();
      expect(h.state.restarts).toBe(0);
      expectJobCompletes(h);
    },
  );

  it(
    'refuses hostile or misplaced outer reports without changing anything; differing hashes are a divergence',
    SLOW,
    () => {
      const h = swarm();
      reportThrough(h, 2 * H + 1, [name(3)]);
      for (const [forge, code] of [
        [{ step: 3 * H }, 'wrong_step'],
        [{ step: H }, 'stale_step'],
        [{ rank: 7 }, 'forged_rank'],
        [{ round: 999 }, 'stale_round'],
      ] as const) {
        const before = h.state;
        h.outer(name(1), 2 * H, forge);
        expect(h.state, JSON.stringify(forge)).toBe(before);
        expect(h.lastReceived(name(1))).toMatchObject({ type: 'error', code });
      }
      // t03 has not reported step 8: its outer step of 8 is refused.
      let before = h.state;
      h.outer(name(3), 2 * H);
      expect(h.state).toBe(before);
      expect(h.lastReceived(name(3))).toMatchObject({ type: 'error', code: 'wrong_step' });
      h.outer(name(1), 2 * H);
      before = h.state;
      h.outer(name(1), 2 * H);
      expect(h.state).toBe(before);
      expect(h.lastReceived(name(1))).toMatchObject({ type: 'error', code: 'duplicate_report' });
      // Another hash for the same outer step: divergence, the round closes with restore.
      h.outer(name(2), 2 * H, { hash: hashOf(999) });
      expect(h.received(name(2), 'round_closed').at(-1)).toMatchObject({ reason: 'divergence', restore: true });
      expect(h.state.restarts).toBe(1);
      expect(h.state.lastCommit.step).toBe(H);
    },
  );

  it(
    'a goodbye while an outer step is in flight carries both groups on: each loses only the leaver’s slices',
    SLOW,
    () => {
      const h = swarm();
      reportThrough(h, 2 * H + 2);
      const split = shares(h);
      // Some ranks finished the allreduce with the old world and reported it: they report it again.
      for (let i = 0; i < 5; i++) h.outer(name(i), 2 * H);
      h.send(name(9), { type: 'goodbye', runId: h.runId, workerId: h.worker(name(9)).workerId! });
      expect(h.state.restarts).toBe(0);
      expectBothGroupsCarried(h, split, 9);
      expectJobCompletes(h);
    },
  );

  it('a crash while an outer step is in flight carries both groups on, counted as a restart', SLOW, () => {
    const h = swarm();
    // Fast ranks are into the next group, slow ones still in 5–8.
    reportThrough(h, 2 * H - 1);
    reportThrough(h, 2 * H + 3, [name(0), name(1), name(2)]);
    const split = shares(h);
    h.disconnect(name(12));
    expect(h.state.restarts).toBe(1);
    expectBothGroupsCarried(h, split, 12);
    expectJobCompletes(h);
  });

  it('a tab hung in the next group’s inner steps is judged by its reports and costs only its slices', SLOW, () => {
    const h = swarm();
    const split = shares(h);
    const hung = name(5);
    reportThrough(h, 2 * H + 1);
    // The others report the successor's last step (an inner one: judged) and wait at its end (not judged).
    reportThrough(h, 3 * H, [hung]);
    h.advance(HANG_FLOOR_MS + 10);
    expect(h.logs.some((l) => l.event === 'member_hung' && l.data.workerId === h.worker(hung).workerId)).toBe(true);
    expect(h.worker(hung).closedByServer).toBe(true);
    expectBothGroupsCarried(h, split, 5);
  });

  it('the first step of a group is not judged: a rank may wait there for the previous outer step', SLOW, () => {
    const h = swarm();
    reportThrough(h, 2 * H);
    // Everyone's next report is the successor's first step, behind the outer step of 8: long waits pass.
    h.advance(10 * HANG_FLOOR_MS);
    expect(h.logs.some((l) => l.event === 'member_hung')).toBe(false);
    expect(h.members()).toHaveLength(N);
  });

  it(
    'a join waits for a drained outer step: the next one is synchronous, then the round takes the newcomer',
    SLOW,
    () => {
      const h = swarm();
      reportThrough(h, 2 * H + 1);
      h.join('late');
      expect(h.members()).not.toContain('late');
      outerAll(h, 2 * H);
      // The commit of 8 asks for a synchronous outer step of 9–12 (its successor would start in the old world).
      expect(h.received(name(0), 'committed').at(-1)).toMatchObject({ step: 2 * H, drain: true });
      expect(h.state.rendezvous.phase).toBe('training');
      // No inner step past the drained group is taken.
      reportThrough(h, 3 * H);
      const past = h.report(name(0));
      expect(past.some((a) => a.kind === 'send' && a.msg.type === 'error' && a.msg.code === 'wrong_step')).toBe(true);
      outerAll(h, 3 * H);
      expect(h.members()).toContain('late');
      expect(h.members()).toHaveLength(N + 1);
      expect(h.state.restarts).toBe(0);
      expectJobCompletes(h);
    },
  );

  it('a coordinator restart while an outer step is in flight redoes the groups in flight', SLOW, () => {
    const h = swarm();
    reportThrough(h, 2 * H + 2);
    outerAll(h, 2 * H, [name(4)]);
    const record = h.state.record;
    h.restart(restoreState(JSON.parse(JSON.stringify(h.durable))));
    expect(h.state.lastCommit.step).toBe(H);
    expect(h.state.record).toEqual(record);
    for (let i = 0; i < N; i++) h.join(name(i));
    h.advance(2000);
    expect(h.members()).toHaveLength(N);
    // A fresh round from the record: nothing carried, both groups in flight redone.
    expect(h.worker(h.members()[0]).round!.carry).toBeUndefined();
    expect(h.worker(h.members()[0]).round!.step).toBe(H + 1);
    h.readyAll();
    expectJobCompletes(h);
    expect(rangesCount(h.state.record.holes)).toBe(0);
  });
});
