/**
 * Which groups overlap their outer step with the next group's inner steps (core/training/overlap.ts),
 * and the record when an overlapped group's successor, planned before its predecessor committed
 * partially, commits (sampler.ts `commitGroup` with deferred holes): the predecessor's lost slices stay
 * holes through it, and the group after serves them first. Checked against positions listed by hand.
 */
import { describe, expect, it } from 'vitest';
import { groupPlan, positionAfterGroup, type PositionRange } from '../../../core/training/groups';
import { parseJobSpec } from '../../../core/training/job';
import { endsEpoch, overlapsNext, overlapsOuterSteps, successorPlan } from '../../../core/training/overlap';
import { commitGroup, emptyRecord, epochOrder, groupAt, processedIndices } from '../../../core/training/sampler';

const PLAN = { datasetSize: 100, globalBatch: 10, epochs: 2, commitEvery: 4 };
const OVERLAP = parseJobSpec({ sync: { mode: 'local', innerSteps: 4, overlap: true } });
const NONE = { carriedThrough: null, drainedAt: null };

describe('the overlap rule', () => {
  it('overlaps a group unless the job does not, it ends the epoch, it is drained or it is the last carried group', () => {
    expect(overlapsOuterSteps(OVERLAP)).toBe(true);
    expect(overlapsOuterSteps(parseJobSpec({ sync: { mode: 'local', innerSteps: 4 } }))).toBe(false);
    expect(overlapsOuterSteps(parseJobSpec({}))).toBe(false);
    // An epoch of 10 steps: groups 1–4, 5–8, 9–10 (its end).
    const g1 = groupPlan({ epoch: 0, cursor: 0, holes: [] }, 1, PLAN);
    const g2 = successorPlan(g1, PLAN);
    const g3 = successorPlan(g2, PLAN);
    expect([g2.firstStep, g2.lastStep, g3.firstStep, g3.lastStep]).toEqual([5, 8, 9, 10]);
    expect([endsEpoch(g1, PLAN), endsEpoch(g2, PLAN), endsEpoch(g3, PLAN)]).toEqual([false, false, true]);
    expect(overlapsNext(OVERLAP, g1, PLAN, NONE)).toBe(true);
    expect(overlapsNext(OVERLAP, g3, PLAN, NONE)).toBe(false);
    expect(overlapsNext(parseJobSpec({}), g1, PLAN, NONE)).toBe(false);
    expect(overlapsNext(OVERLAP, g1, PLAN, { carriedThrough: null, drainedAt: 4 })).toBe(false);
    expect(overlapsNext(OVERLAP, g1, PLAN, { carriedThrough: null, drainedAt: 8 })).toBe(true);
    // A carry of two groups: the first overlaps, the second (the last carried) does not.
    expect(overlapsNext(OVERLAP, g1, PLAN, { carriedThrough: 8, drainedAt: null })).toBe(true);
    expect(overlapsNext(OVERLAP, g2, PLAN, { carriedThrough: 8, drainedAt: null })).toBe(false);
    expect(overlapsNext(OVERLAP, g1, PLAN, { carriedThrough: 4, drainedAt: null })).toBe(false);
  });

  it('plans the successor where the record stands once the group commits whole, holes served first', () => {
    const at = { epoch: 0, cursor: 60, holes: [[12, 15]] as PositionRange[] };
    const g = groupPlan(at, 7, PLAN);
    const next = successorPlan(g, PLAN);
    expect(next.start).toEqual(positionAfterGroup(at, g, [], PLAN.datasetSize));
    expect(next.firstStep).toBe(g.lastStep + 1);
    // The hole went into the first group's first step; the successor takes the tail after it.
    expect(g.steps[0].ranges).toEqual([
      [12, 15],
      [60, 67],
    ]);
    expect(next.steps[0].ranges).toEqual([[97, 100]]);
  });
});

describe('committing a successor planned before its predecessor committed partially', () => {
  const order = epochOrder(5, 0, PLAN.datasetSize);
  const first = groupAt(emptyRecord(PLAN.datasetSize), 1, PLAN);
  const second = successorPlan(first, PLAN);
  /** A rank's slices in the first group: positions 2–4 of each step. */
  const lostFirst: PositionRange[] = [
    [2, 5],
    [12, 15],
    [22, 25],
    [32, 35],
  ];

  it('keeps the predecessor’s lost slices as holes, adds its own, and the group after serves them all first', () => {
    const afterFirst = commitGroup(emptyRecord(PLAN.datasetSize), order, first, lostFirst);
    expect(afterFirst.holes).toEqual(lostFirst);
    const lostSecond: PositionRange[] = [[45, 47]];
    const afterSecond = commitGroup(afterFirst, order, second, lostSecond, lostFirst);
    expect(afterSecond.cursor).toBe(80);
    expect(afterSecond.holes).toEqual([...lostFirst, [45, 47]]);
    // Processed: [0, 80) less the holes, position by position.
    const expected = Array.from({ length: 80 }, (_, p) => p)
      .filter((p) => ![...lostFirst, [45, 47]].some(([a, b]) => a <= p && p < b))
      .map((p) => order[p])
      .sort((a, b) => a - b);
    expect(processedIndices(afterSecond)).toEqual(expected);
    const third = groupAt(afterSecond, 9, PLAN);
    expect(third.steps[0].ranges).toEqual([
      [2, 5],
      [12, 15],
      [22, 25],
      [32, 33],
    ]);
  });

  it('refuses deferred holes the record does not hold, and the successor without them', () => {
    const afterFirst = commitGroup(emptyRecord(PLAN.datasetSize), order, first, lostFirst);
    expect(() => commitGroup(afterFirst, order, second, [], [[2, 5]])).toThrow(/the group starts at/);
    expect(() => commitGroup(afterFirst, order, second, [])).toThrow(/the group starts at/);
  });
});
