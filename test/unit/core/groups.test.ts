/**
 * The group plan (core/training/groups.ts) as tables: holes are served first, a group ends at the
 * epoch's end, a partial commit's lost slices become holes, and without holes every step of a few
 * plans lies exactly where the step-number layout of earlier releases put it
 * (test/support/hole-free-layout.ts).
 */
import { describe, expect, it } from 'vitest';
import {
  groupPlan,
  indicesAt,
  jobDone,
  MAX_HOLES,
  mergeRanges,
  plannedSteps,
  positionAfterGroup,
  rankRanges,
  remainingSteps,
  slotsRanges,
  slotsSamples,
  type PositionRange,
  type RecordPosition,
  type StepPlan,
} from '../../../core/training/groups';
import {
  referenceIsCommitPoint,
  referencePositionAfter,
  referenceSlice,
  referenceStepPosition,
  referenceTotalSteps,
} from '../../support/hole-free-layout';

const start: RecordPosition = { epoch: 0, cursor: 0, holes: [] };

describe('without holes, the group plan is the layout of earlier releases', () => {
  const plans: StepPlan[] = [
    { datasetSize: 10, globalBatch: 3, epochs: 2, commitEvery: 3 },
    { datasetSize: 95, globalBatch: 10, epochs: 3, commitEvery: 4 },
    { datasetSize: 200, globalBatch: 16, epochs: 2, commitEvery: 1 },
    { datasetSize: 200, globalBatch: 16, epochs: 2, commitEvery: 4 },
    { datasetSize: 7, globalBatch: 64, epochs: 3, commitEvery: 5 },
    { datasetSize: 64, globalBatch: 8, epochs: 1, commitEvery: 8 },
  ];
  const shareSets = [[1], [1, 1, 1], [0.25, 0.75], [0.1, 0, 0.5, 0.4]];
  for (const plan of plans) {
    it(`every step, commit point, slice and the job's end of ${JSON.stringify(plan)}`, () => {
      let at = start;
      let step = 1;
      while (!jobDone(at, plan)) {
        const group = groupPlan(at, step, plan);
        for (const span of group.steps) {
          const ref = referenceStepPosition(span.step, plan);
          expect(group.epoch, `epoch of step ${span.step}`).toBe(ref.epoch);
          expect(span.ranges, `positions of step ${span.step}`).toEqual([[ref.cursor, ref.cursor + ref.count]]);
          expect(referenceIsCommitPoint(span.step, plan), `commit point at ${span.step}`).toBe(
            span.step === group.lastStep,
          );
          for (const shares of shareSets)
            shares.forEach((_, rank) => {
              const slice = referenceSlice(span.step, plan, shares, rank);
              const expected = slice.count > 0 ? [[slice.start, slice.start + slice.count]] : [];
              expect(rankRanges(span, shares, rank), `rank ${rank} of step ${span.step}`).toEqual(expected);
            });
        }
        at = positionAfterGroup(at, group, [], plan.datasetSize);
        const ref = referencePositionAfter(group.lastStep, plan);
        expect({ epoch: at.epoch, cursor: at.cursor, holes: at.holes }).toEqual({ ...ref, holes: [] });
        expect(remainingSteps(at, plan)).toBe(referenceTotalSteps(plan) - group.lastStep);
        step = group.lastStep + 1;
      }
      expect(step - 1).toBe(referenceTotalSteps(plan));
      expect(plannedSteps(plan)).toBe(referenceTotalSteps(plan));
    });
  }
});

describe('a group plan with holes', () => {
  type Case = [
    string,
    StepPlan,
    RecordPosition,
    PositionRange[][],
    { cursorAfter: number; holesAfter: PositionRange[] },
  ];
  const plan = (commitEvery: number, globalBatch = 3, datasetSize = 30): StepPlan => ({
    datasetSize,
    globalBatch,
    epochs: 2,
    commitEvery,
  });
  const cases: Case[] = [
    [
      'serves the holes first, in ascending order, then the tail',
      plan(3),
      {
        epoch: 0,
        cursor: 20,
        holes: [
          [4, 6],
          [10, 12],
        ],
      },
      [
        [
          [4, 6],
          [10, 11],
        ],
        [
          [11, 12],
          [20, 22],
        ],
        [[22, 25]],
      ],
      { cursorAfter: 25, holesAfter: [] },
    ],
    [
      'ends a group inside a hole: the rest stays a hole',
      plan(2),
      { epoch: 0, cursor: 20, holes: [[0, 10]] },
      [[[0, 3]], [[3, 6]]],
      { cursorAfter: 20, holesAfter: [[6, 10]] },
    ],
    [
      'keeps later holes that the group did not reach',
      plan(1),
      {
        epoch: 0,
        cursor: 20,
        holes: [
          [1, 2],
          [5, 9],
          [15, 16],
        ],
      },
      [
        [
          [1, 2],
          [5, 7],
        ],
      ],
      {
        cursorAfter: 20,
        holesAfter: [
          [7, 9],
          [15, 16],
        ],
      },
    ],
    [
      'ends early at the epoch end (a short last step)',
      plan(4),
      { epoch: 1, cursor: 25, holes: [] },
      [[[25, 28]], [[28, 30]]],
      { cursorAfter: 30, holesAfter: [] },
    ],
    [
      'serves holes left at the epoch end in a group of their own',
      plan(4),
      {
        epoch: 0,
        cursor: 30,
        holes: [
          [2, 5],
          [27, 29],
        ],
      },
      [[[2, 5]], [[27, 29]]],
      { cursorAfter: 30, holesAfter: [] },
    ],
  ];
  for (const [name, p, at, steps, after] of cases) {
    it(name, () => {
      const group = groupPlan(at, 7, p);
      expect(group.steps.map((s) => s.ranges)).toEqual(steps);
      expect(group.steps.map((s) => s.step)).toEqual(steps.map((_, k) => 7 + k));
      expect(group.steps.map((s) => s.count)).toEqual(steps.map((r) => r.reduce((a, [s, e]) => a + e - s, 0)));
      expect({ cursorAfter: group.cursorAfter, holesAfter: group.holesAfter }).toEqual(after);
      expect(group.lastStep).toBe(7 + steps.length - 1);
    });
  }

  it('moves to the next epoch only when tail and holes are all consumed', () => {
    const p = plan(4);
    const withHoles: RecordPosition = {
      epoch: 0,
      cursor: 30,
      holes: [
        [2, 5],
        [27, 29],
      ],
    };
    expect(positionAfterGroup(withHoles, groupPlan(withHoles, 1, p), [], 30)).toEqual({
      epoch: 1,
      cursor: 0,
      holes: [],
    });
    // A partial commit at the epoch's end keeps the epoch open for the lost positions.
    const tail: RecordPosition = { epoch: 0, cursor: 27, holes: [] };
    expect(positionAfterGroup(tail, groupPlan(tail, 1, p), [[28, 29]], 30)).toEqual({
      epoch: 0,
      cursor: 30,
      holes: [[28, 29]],
    });
  });
});

describe('slices of a split and partial commits', () => {
  it("splits a step that spans several ranges in R order, by each slot's share", () => {
    const step = {
      step: 1,
      ranges: [
        [4, 6],
        [10, 11],
        [20, 25],
      ] as PositionRange[],
      count: 8,
    };
    expect([0, 1, 2].map((slot) => rankRanges(step, [1, 1, 1], slot))).toEqual([
      [
        [4, 6],
        [10, 11],
      ],
      [[20, 23]],
      [[23, 25]],
    ]);
    expect(rankRanges(step, [0, 1], 0)).toEqual([]);
    expect(() => rankRanges(step, [1, 1], 2)).toThrow(/slot 2/);
  });

  it('leaves exactly the lost slots’ slices as holes, served first by the next group', () => {
    const p: StepPlan = { datasetSize: 100, globalBatch: 12, epochs: 1, commitEvery: 3 };
    const shares = [0.25, 0.25, 0.5];
    const group = groupPlan(start, 1, p);
    const lost = slotsRanges(group, shares, [1]);
    // Slot 1 computes positions 3..5 of each step of 12.
    expect(lost).toEqual([
      [3, 6],
      [15, 18],
      [27, 30],
    ]);
    const kept = slotsRanges(group, shares, [0, 2]);
    expect(mergeRanges([...kept, ...lost])).toEqual([[0, 36]]);
    expect(slotsSamples(group, shares, [0, 2])).toBe(27);
    const after = positionAfterGroup(start, group, lost, 100);
    expect(after).toEqual({ epoch: 0, cursor: 36, holes: lost });
    const next = groupPlan(after, group.lastStep + 1, p);
    expect(next.steps[0].ranges).toEqual([
      [3, 6],
      [15, 18],
      [27, 30],
      [36, 39],
    ]);
    expect(next.holesAfter).toEqual([]);
  });

  it('refuses lost positions outside the group and more holes than MAX_HOLES', () => {
    const p: StepPlan = { datasetSize: 10 * MAX_HOLES, globalBatch: 4 * MAX_HOLES, epochs: 1, commitEvery: 1 };
    const group = groupPlan(start, 1, p);
    expect(() => positionAfterGroup(start, group, [[group.cursorAfter, group.cursorAfter + 1]], p.datasetSize)).toThrow(
      /past the group/,
    );
    const many: PositionRange[] = Array.from({ length: MAX_HOLES + 1 }, (_, i) => [2 * i, 2 * i + 1]);
    expect(() => positionAfterGroup(start, group, many, p.datasetSize)).toThrow(/exceed/);
  });

  it('refuses a position whose holes are not below the cursor, and a done job', () => {
    const p: StepPlan = { datasetSize: 30, globalBatch: 3, epochs: 1, commitEvery: 1 };
    expect(() => groupPlan({ epoch: 0, cursor: 5, holes: [[4, 6]] }, 1, p)).toThrow(/bad record position/);
    expect(() =>
      groupPlan(
        {
          epoch: 0,
          cursor: 9,
          holes: [
            [4, 6],
            [5, 7],
          ],
        },
        1,
        p,
      ),
    ).toThrow(/bad record position/);
    expect(() => groupPlan({ epoch: 1, cursor: 0, holes: [] }, 1, p)).toThrow(/past the job/);
  });

  it('reads the indices of several ranges in order', () => {
    const order = Uint32Array.from([9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
    expect(
      Array.from(
        indicesAt(order, [
          [1, 3],
          [6, 8],
        ]),
      ),
    ).toEqual([8, 7, 3, 2]);
    expect(Array.from(indicesAt(order, [[4, 5]]))).toEqual([5]);
  });

  it('counts the remaining steps with holes: the holes are extra steps', () => {
    const p: StepPlan = { datasetSize: 30, globalBatch: 3, epochs: 2, commitEvery: 1 };
    expect(remainingSteps({ epoch: 0, cursor: 30, holes: [[0, 4]] }, p)).toBe(2 + 10);
    expect(remainingSteps({ epoch: 2, cursor: 0, holes: [] }, p)).toBe(0);
  });
});
