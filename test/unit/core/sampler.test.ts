import { describe, expect, it } from 'vitest';
import {
  assignStep,
  base64ToBytes,
  bytesToBase64,
  commitStep,
  emptyRecord,
  epochOrder,
  indicesForRank,
  isCommitPoint,
  nextCommitPoint,
  positionAfter,
  processedIndices,
  remaining,
  rollbackTo,
  stepPosition,
  stepSize,
  totalSteps,
  type SamplerRecord,
  type StepPlan,
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

describe('steps of an epoch', () => {
  const plan: StepPlan = { datasetSize: 10, globalBatch: 3, epochs: 2, commitEvery: 3 };

  it('consumes the order globalBatch positions at a time; the last step is short', () => {
    expect([0, 3, 6, 9, 10].map((c) => stepSize(c, 10, 3))).toEqual([3, 3, 3, 1, 0]);
    expect([1, 2, 3, 4, 5, 8].map((s) => stepPosition(s, plan))).toEqual([
      { epoch: 0, cursor: 0, count: 3 },
      { epoch: 0, cursor: 3, count: 3 },
      { epoch: 0, cursor: 6, count: 3 },
      { epoch: 0, cursor: 9, count: 1 },
      { epoch: 1, cursor: 0, count: 3 },
      { epoch: 1, cursor: 9, count: 1 },
    ]);
    expect(totalSteps(plan)).toBe(8);
    expect([0, 1, 3, 4, 7, 8].map((s) => positionAfter(s, plan))).toEqual([
      { epoch: 0, cursor: 0 },
      { epoch: 0, cursor: 3 },
      { epoch: 0, cursor: 9 },
      { epoch: 1, cursor: 0 },
      { epoch: 1, cursor: 9 },
      { epoch: 2, cursor: 0 },
    ]);
  });

  it('commits every commitEvery steps, at epoch ends and at the job end', () => {
    const points = Array.from({ length: 8 }, (_, i) => i + 1).filter((s) => isCommitPoint(s, plan));
    // Counted within each epoch of 4 steps: the 3rd step of each, and each epoch's end.
    expect(points).toEqual([3, 4, 7, 8]);
    for (let committed = 0; committed < 8; committed++) {
      const reference = points.find((p) => p > committed);
      expect(nextCommitPoint(committed, plan)).toBe(reference);
    }
    const odd: StepPlan = { datasetSize: 95, globalBatch: 10, epochs: 3, commitEvery: 4 };
    for (let committed = 0; committed < totalSteps(odd); committed++) {
      let k = committed + 1;
      while (!isCommitPoint(k, odd)) k++;
      expect(nextCommitPoint(committed, odd)).toBe(k);
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

describe('indicesForRank', () => {
  it('gives ranks disjoint slices whose union is the step, whatever the world: a world change moves samples between ranks, never out of the step', () => {
    const rand = mulberry32(2);
    const n = 257;
    const globalBatch = 32;
    const order = epochOrder(3, 0, n);
    for (let cursor = 0; cursor < n; cursor += globalBatch) {
      const stepIndices = Array.from(order.subarray(cursor, cursor + globalBatch)).sort((a, b) => a - b);
      for (let world = 1; world <= 7; world++) {
        const shares = randomShares(rand, world);
        const union: number[] = [];
        for (let rank = 0; rank < world; rank++)
          union.push(...indicesForRank(order, cursor, globalBatch, shares, rank));
        expect(union.sort((a, b) => a - b)).toEqual(stepIndices);
      }
    }
  });

  it('rejects a rank outside the world', () => {
    expect(() => indicesForRank(epochOrder(1, 0, 10), 0, 4, [1, 1], 2)).toThrow(/rank 2/);
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

  it('marks exactly the consumed prefix of the order as processed; remaining is the rest, in order', () => {
    const n = 50;
    const order = epochOrder(9, 0, n);
    let record = emptyRecord(n);
    for (const count of [7, 7, 0, 13]) record = commitStep(record, order, count);
    expect(record.cursor).toBe(27);
    expect(record.processedCount).toBe(27);
    expect(processedIndices(record)).toEqual(Array.from(order.subarray(0, 27)).sort((a, b) => a - b));
    expect(Array.from(remaining(record, order))).toEqual(Array.from(order.subarray(27)));
  });

  it('moves to the next epoch with an empty set when the epoch is consumed', () => {
    const order = epochOrder(9, 0, 10);
    const record = commitStep(commitStep(emptyRecord(10), order, 6), order, 4);
    expect(record).toEqual({ ...emptyRecord(10), epoch: 1 });
  });

  it('refuses to run past the epoch or to process an index twice', () => {
    const order = epochOrder(9, 0, 10);
    expect(() => commitStep(emptyRecord(10), order, 11)).toThrow(/exceed/);
    const forged: SamplerRecord = {
      ...emptyRecord(10),
      cursor: 0,
      processed: commitStep(emptyRecord(10), order, 3).processed,
    };
    expect(() => commitStep(forged, order, 2)).toThrow(/already processed/);
  });

  it('rolls back to an earlier position exactly as the record was then', () => {
    const n = 40;
    const order = epochOrder(5, 2, n);
    const snapshots: SamplerRecord[] = [];
    let record: SamplerRecord = { ...emptyRecord(n), epoch: 2 };
    for (let i = 0; i < 5; i++) {
      snapshots.push(record);
      record = commitStep(record, order, 6);
    }
    for (const snap of snapshots) expect(rollbackTo(2, snap.cursor, order)).toEqual(snap);
  });
});

/**
 * The intent of Horovod's test_elastic_sampler (record, commit, restore, sync, repartition across world
 * sizes) on our coordinator-kept record: random world changes, commits, failures (uncommitted work
 * lost) and rollbacks to checkpoints; every index is committed at most once per epoch at every moment
 * and exactly once per finished epoch.
 */
describe('record under churn (after Horovod test_elastic_sampler)', () => {
  for (const seed of [11, 12, 13]) {
    it(`commits every index exactly once per epoch through random commits, failures, rollbacks and world changes (seed ${seed})`, () => {
      const rand = mulberry32(seed);
      const plan: StepPlan = { datasetSize: 103, globalBatch: 10, epochs: 3, commitEvery: 1 };
      let record = emptyRecord(plan.datasetSize);
      let committedStep = 0;
      // The commit log as the store keeps it: one row per commit, deleted on rollback.
      let log: { step: number; epoch: number; indices: number[] }[] = [];
      let checkpoint = { step: 0, record };
      let shares = [1];
      let guard = 0;
      while (committedStep < totalSteps(plan) && guard++ < 10000) {
        const r = rand();
        if (r < 0.15) {
          shares = randomShares(rand, 1 + Math.floor(rand() * 7)); // world change: repartition
          continue;
        }
        const step = committedStep + 1;
        const { epoch, cursor, count } = stepPosition(step, plan);
        expect(record.epoch).toBe(epoch);
        expect(record.cursor).toBe(cursor);
        const order = epochOrder(77, epoch, plan.datasetSize);
        // Every rank computes its slice; together they are the step's positions.
        const computed: number[] = [];
        for (let rank = 0; rank < shares.length; rank++)
          computed.push(...indicesForRank(order, cursor, plan.globalBatch, shares, rank));
        expect(computed.slice().sort((a, b) => a - b)).toEqual(
          Array.from(order.subarray(cursor, cursor + count)).sort((a, b) => a - b),
        );
        if (r < 0.25) continue; // a failure: the step is lost, the record does not move
        if (r < 0.3) {
          // every tab gone: roll back to the checkpoint
          record = checkpoint.record;
          committedStep = checkpoint.step;
          log = log.filter((row) => row.step <= checkpoint.step);
          if (committedStep > 0) {
            const at = positionAfter(committedStep, plan);
            expect(rollbackTo(at.epoch, at.cursor, epochOrder(77, at.epoch, plan.datasetSize))).toEqual(record);
          }
          continue;
        }
        record = commitStep(record, order, count);
        committedStep = step;
        log.push({ step, epoch, indices: computed });
        if (rand() < 0.2) checkpoint = { step, record };
        // At every moment: no index twice within an epoch.
        for (let e = 0; e <= record.epoch && e < plan.epochs; e++) {
          const all = log.filter((row) => row.epoch === e).flatMap((row) => row.indices);
          expect(new Set(all).size).toBe(all.length);
        }
      }
      expect(committedStep).toBe(totalSteps(plan));
      for (let e = 0; e < plan.epochs; e++) {
        const all = log
          .filter((row) => row.epoch === e)
          .flatMap((row) => row.indices)
          .sort((a, b) => a - b);
        expect(all).toEqual(Array.from({ length: plan.datasetSize }, (_, i) => i));
      }
    });
  }
});
