/**
 * The sampler: epoch orders, the split of a step across ranks (`assignStep`) and the record (cursor,
 * holes, processed bitset) under commits, partial commits, rollbacks and churn. Where the positions
 * of a group lie is tested in groups.test.ts.
 */
import { describe, expect, it } from 'vitest';
import {
  assignStep,
  jobDone,
  mergeRanges,
  positionAfterGroup,
  slotsRanges,
  type PositionRange,
  type StepPlan,
} from '../../../core/training/groups';
import {
  base64ToBytes,
  bytesToBase64,
  commitGroup,
  emptyRecord,
  epochOrder,
  groupAt,
  processedIndices,
  recordPosition,
  remaining,
  rollbackTo,
  withHoles,
  type SamplerRecord,
} from '../../../core/training/sampler';
import { mulberry32, randomInt } from '../../support/rng';

function isPermutation(order: Uint32Array, n: number): boolean {
  if (order.length !== n) return false;
  const seen = new Uint8Array(n);
  for (const i of order) {
    if (i >= n || seen[i]) return false;
    seen[i] = 1;
  }
  return true;
}

function randomShares(rand: () => number, world: number): number[] {
  // Mix zero, tiny and large shares: the split must still cover the step exactly.
  return Array.from({ length: world }, () => {
    const r = rand();
    return r < 0.1 ? 0 : r < 0.2 ? 1e-7 : rand() * 10;
  });
}

describe('epochOrder', () => {
  it('is a permutation of 0..n-1 for small and odd sizes', () => {
    for (const n of [0, 1, 2, 3, 7, 64, 1000, 60000]) expect(isPermutation(epochOrder(42, 0, n), n)).toBe(true);
  });

  it('is deterministic and differs between epochs and seeds', () => {
    const a = Array.from(epochOrder(7, 3, 500));
    expect(Array.from(epochOrder(7, 3, 500))).toEqual(a);
    expect(Array.from(epochOrder(7, 4, 500))).not.toEqual(a);
    expect(Array.from(epochOrder(8, 3, 500))).not.toEqual(a);
  });

  it('keeps the pinned order, so browsers and Node that run this code agree with older runs', () => {
    // Pinned once; a change here silently changes every run's sample order.
    expect(Array.from(epochOrder(42, 0, 12))).toEqual([4, 8, 7, 0, 10, 3, 11, 2, 1, 9, 6, 5]);
  });

  it('places each element uniformly (chi-square over many seeds)', () => {
    const n = 5;
    const trials = 20000;
    const counts = Array.from({ length: n }, () => new Array(n).fill(0));
    for (let seed = 0; seed < trials; seed++) {
      const order = epochOrder(seed, 1, n);
      for (let pos = 0; pos < n; pos++) counts[order[pos]][pos]++;
    }
    const expected = trials / n;
    for (const row of counts) {
      const chi2 = row.reduce((acc, c) => acc + (c - expected) ** 2 / expected, 0);
      // 4 degrees of freedom: P(chi2 > 23) < 2e-4.
      expect(chi2).toBeLessThan(23);
    }
  });
});

describe('assignStep', () => {
  it('splits a step into contiguous, disjoint slices covering it exactly, for world sizes 1..7 and random shares', () => {
    const rand = mulberry32(1);
    for (let trial = 0; trial < 400; trial++) {
      const world = 1 + (trial % 7);
      const shares = randomShares(rand, world);
      const cursor = randomInt(rand, 0, 1000);
      const count = randomInt(rand, 0, 300);
      const slices = assignStep(cursor, count, shares);
      expect(slices).toHaveLength(world);
      let next = cursor;
      for (const slice of slices) {
        expect(slice.start).toBe(next);
        expect(slice.count).toBeGreaterThanOrEqual(0);
        next += slice.count;
      }
      expect(next).toBe(cursor + count);
      // Largest remainder: every slice is the floor or the ceiling of its exact quota.
      const total = shares.reduce((a, b) => a + b, 0);
      slices.forEach((slice, rank) => {
        const quota = total > 0 ? (count * shares[rank]) / total : count / world;
        expect(slice.count).toBeGreaterThanOrEqual(Math.floor(quota + 1e-9) - 0);
        expect(slice.count).toBeLessThanOrEqual(Math.ceil(quota - 1e-9));
      });
    }
  });

  it('gives equal shares sizes within one of each other, extra samples to the lower ranks', () => {
    expect(assignStep(0, 10, [1, 1, 1]).map((s) => s.count)).toEqual([4, 3, 3]);
    expect(assignStep(5, 2, [1, 1, 1, 1]).map((s) => s.count)).toEqual([1, 1, 0, 0]);
    expect(assignStep(0, 128, [0.25, 0.75]).map((s) => s.count)).toEqual([32, 96]);
  });

  it('is the same split for the same inputs (no hidden state)', () => {
    const shares = [0.123456, 0.5, 0.376544];
    expect(assignStep(17, 101, shares)).toEqual(assignStep(17, 101, [...shares]));
  });
});

describe('the sampler record', () => {
  it('encodes the bitset as standard base64 (checked against Node Buffer)', () => {
    const rand = mulberry32(3);
    for (let len = 0; len < 40; len++) {
      const bytes = Uint8Array.from({ length: len }, () => Math.floor(rand() * 256));
      const text = bytesToBase64(bytes);
      expect(text).toBe(Buffer.from(bytes).toString('base64'));
      expect(Array.from(base64ToBytes(text))).toEqual(Array.from(bytes));
    }
    expect(() => base64ToBytes('ab$=')).toThrow();
  });

  const plan: StepPlan = { datasetSize: 50, globalBatch: 7, epochs: 2, commitEvery: 2 };

  /** The indices of `ranges` of `order`, sorted. */
  const sorted = (order: Uint32Array, ranges: PositionRange[]) =>
    ranges.flatMap(([s, e]) => Array.from(order.subarray(s, e))).sort((a, b) => a - b);

  it('marks exactly the committed positions; remaining is the holes, then the tail', () => {
    const order = epochOrder(9, 0, plan.datasetSize);
    let record = emptyRecord(plan.datasetSize);
    record = commitGroup(record, order, groupAt(record, 1, plan));
    expect({ cursor: record.cursor, holes: record.holes, processedCount: record.processedCount }).toEqual({
      cursor: 14,
      holes: [],
      processedCount: 14,
    });
    // A partial commit: slot 1 of three equal slots is lost in both steps.
    const group = groupAt(record, 3, plan);
    const lost = slotsRanges(group, [1, 1, 1], [1]);
    expect(lost).toEqual([
      [17, 19],
      [24, 26],
    ]);
    record = commitGroup(record, order, group, lost);
    expect({ cursor: record.cursor, holes: record.holes, processedCount: record.processedCount }).toEqual({
      cursor: 28,
      holes: lost,
      processedCount: 24,
    });
    const processed = mergeRanges([
      [0, 17],
      [19, 24],
      [26, 28],
    ]);
    expect(processedIndices(record)).toEqual(sorted(order, processed));
    expect(Array.from(remaining(record, order))).toEqual([
      ...order.subarray(17, 19),
      ...order.subarray(24, 26),
      ...order.subarray(28),
    ]);
  });

  it('moves to the next epoch with an empty set when tail and holes are consumed', () => {
    const p: StepPlan = { datasetSize: 10, globalBatch: 4, epochs: 2, commitEvery: 3 };
    const order = epochOrder(9, 0, 10);
    let record = emptyRecord(10);
    const group = groupAt(record, 1, p);
    record = commitGroup(record, order, group, [[5, 6]]);
    expect(record).toMatchObject({ epoch: 0, cursor: 10, holes: [[5, 6]], processedCount: 9 });
    record = commitGroup(record, order, groupAt(record, 4, p));
    expect(record).toEqual({ ...emptyRecord(10), epoch: 1 });
  });

  it('refuses a group that does not start at the record, lost positions outside it, or an index twice', () => {
    const order = epochOrder(9, 0, plan.datasetSize);
    const record = emptyRecord(plan.datasetSize);
    const group = groupAt(record, 1, plan);
    const moved = commitGroup(record, order, group);
    expect(() => commitGroup(moved, order, group)).toThrow(/starts at/);
    expect(() => commitGroup(record, order, group, [[20, 21]])).toThrow();
    const forged: SamplerRecord = { ...record, processed: moved.processed };
    expect(() => commitGroup(forged, order, group)).toThrow(/already processed/);
  });

  it('rolls back to an earlier position, holes included, exactly as the record was then', () => {
    const n = 40;
    const p: StepPlan = { datasetSize: n, globalBatch: 3, epochs: 3, commitEvery: 2 };
    const order = epochOrder(5, 2, n);
    const snapshots: SamplerRecord[] = [];
    let record: SamplerRecord = { ...emptyRecord(n), epoch: 2 };
    for (let i = 0; i < 5; i++) {
      snapshots.push(record);
      const group = groupAt(record, 1 + 2 * i, p);
      record = commitGroup(record, order, group, i % 2 === 1 ? slotsRanges(group, [1, 2], [0]) : []);
    }
    expect(snapshots.some((snap) => snap.holes.length > 0)).toBe(true);
    for (const snap of snapshots) expect(rollbackTo(recordPosition(snap), order)).toEqual(snap);
  });

  it('reads a record persisted before holes existed as one without holes', () => {
    const { holes: _, ...old } = emptyRecord(10);
    expect(withHoles(old)).toEqual(emptyRecord(10));
  });
});

/**
 * The intent of Horovod's test_elastic_sampler (record, commit, restore, sync, repartition across world
 * sizes) on our coordinator-kept record: random world changes, commits, partial commits (a lost slot's
 * slices become holes), failures (uncommitted work lost) and rollbacks to checkpoints; every index is
 * committed at most once per epoch at every moment and exactly once per finished epoch.
 */
describe('record under churn (after Horovod test_elastic_sampler)', () => {
  for (const seed of [11, 12, 13]) {
    it(`commits every index exactly once per epoch through random commits, partial commits, failures, rollbacks and world changes (seed ${seed})`, () => {
      const rand = mulberry32(seed);
      const p: StepPlan = { datasetSize: 103, globalBatch: 10, epochs: 3, commitEvery: 1 + (seed % 3) };
      let record = emptyRecord(p.datasetSize);
      let committedStep = 0;
      // The commit log as the store keeps it: one row per commit, deleted on rollback.
      let log: { step: number; epoch: number; indices: number[] }[] = [];
      let checkpoint = { step: 0, record };
      let shares = [1];
      let partials = 0;
      for (let guard = 0; !jobDone(record, p) && guard < 10000; guard++) {
        const r = rand();
        if (r < 0.15) {
          shares = randomShares(rand, 1 + Math.floor(rand() * 7)); // world change: repartition
          continue;
        }
        const group = groupAt(record, committedStep + 1, p);
        const order = epochOrder(77, record.epoch, p.datasetSize);
        if (r < 0.25) continue; // a failure: the group is lost, the record does not move
        if (r < 0.3) {
          // every tab gone: roll back to the checkpoint
          record = checkpoint.record;
          committedStep = checkpoint.step;
          log = log.filter((row) => row.step <= checkpoint.step);
          expect(rollbackTo(recordPosition(record), epochOrder(77, record.epoch, p.datasetSize))).toEqual(record);
          continue;
        }
        // A partial commit loses a random slot, if there is more than one.
        const lostSlot = shares.length > 1 && r < 0.5 ? randomInt(rand, 0, shares.length - 1) : null;
        const slots = shares.map((_, slot) => slot).filter((slot) => slot !== lostSlot);
        const lost = lostSlot === null ? [] : slotsRanges(group, shares, [lostSlot]);
        const computed = slotsRanges(group, shares, slots).flatMap(([s, e]) => Array.from(order.subarray(s, e)));
        const epoch = record.epoch;
        record = commitGroup(record, order, group, lost);
        expect(recordPosition(record)).toEqual(positionAfterGroup(group.start, group, lost, p.datasetSize));
        partials += lost.length > 0 ? 1 : 0;
        committedStep = group.lastStep;
        log.push({ step: committedStep, epoch, indices: computed });
        if (rand() < 0.2) checkpoint = { step: committedStep, record };
        // At every moment: no index twice within an epoch, and the bitset is what the log committed.
        const current = log.filter((row) => row.epoch === record.epoch).flatMap((row) => row.indices);
        expect(new Set(current).size).toBe(current.length);
        if (record.epoch === epoch) expect(processedIndices(record)).toEqual(current.sort((a, b) => a - b));
      }
      expect(jobDone(record, p)).toBe(true);
      expect(partials).toBeGreaterThan(1);
      for (let e = 0; e < p.epochs; e++) {
        const all = log
          .filter((row) => row.epoch === e)
          .flatMap((row) => row.indices)
          .sort((a, b) => a - b);
        expect(all).toEqual(Array.from({ length: p.datasetSize }, (_, i) => i));
      }
    });
  }
});
