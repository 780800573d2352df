import { describe, expect, it } from 'vitest';
import { jobPublic, parseJobSpec, type JobPublic } from '../../../../core/training/job';
import type { RoundMessage, WorldEntry } from '../../../../core/protocol/coordinator-messages';
import { isCheckpointCommit } from '../../../../core/training/commit-schedule';
import { NO_HASH } from '../../../../core/protocol/tab-messages';
import { epochOrder } from '../../../../core/training/sampler';
import {
  failureReport,
  helloHolding,
  planCarry,
  planSync,
  ringNeighbours,
  StepPlanner,
  stepWork,
  type HeldStates,
} from '../../../../web/elastic/plan';
import { CollectiveError } from '../../../../web/net/collective-error';
import { reweight } from '../../../../web/elastic/sync-modes';
import { mulberry32 } from '../../../support/rng';

function job(overrides: Record<string, unknown> = {}, datasetSize = 1000): JobPublic {
  return jobPublic(
    parseJobSpec({ model: 'tiny-mlp', globalBatch: 64, epochs: 2, seed: 9, checkpointEvery: 5, ...overrides }),
    datasetSize,
  );
}

function world(shares: number[]): WorldEntry[] {
  return shares.map((share, rank) => ({ workerId: `w${rank}`, peerId: `p${rank}`, rank, share }));
}

/** A round from the start of the job (step 1, no holes) over `w`. */
function fromStart(w: WorldEntry[]) {
  return { world: w, step: 1, epoch: 0, cursor: 0 };
}

/**
 * The group of steps 3..4 (cursor 128, batch 64) carried on by slots 0 and 2 of three (shares ¼, ¼, ½)
 * as ranks 0 and 1 of a round split in halves: slot 1 was lost inside the group.
 */
function carriedRound() {
  return {
    world: world([0.5, 0.5]),
    step: 3,
    epoch: 0,
    cursor: 128,
    carry: { shares: [0.25, 0.25, 0.5], slots: [0, 2], reported: [3, 3] },
  };
}

describe('stepWork', () => {
  it('gives the ranks disjoint slices whose union is the step, whatever the world', () => {
    const j = job({}, 1000);
    const rand = mulberry32(3);
    for (const step of [1, 5, 16, 17, 32]) {
      // Independent reference: the step's positions read straight off the epoch order.
      const perEpoch = Math.ceil(1000 / 64);
      const epoch = Math.floor((step - 1) / perEpoch);
      const cursor = ((step - 1) % perEpoch) * 64;
      const expected = Array.from(epochOrder(9, epoch, 1000).slice(cursor, Math.min(cursor + 64, 1000))).sort(
        (a, b) => a - b,
      );
      for (const size of [1, 2, 3, 4, 7]) {
        const shares: number[] = Array.from({ length: size }, () => (rand() < 0.15 ? 0 : rand()));
        if (!shares.some((s) => s > 0)) shares[0] = 1;
        const w = world(shares);
        const all: number[] = [];
        for (let rank = 0; rank < size; rank++) {
          const work = stepWork(j, fromStart(w), rank, step)!;
          expect(work.count).toBe(expected.length);
          expect(work.epoch).toBe(epoch);
          all.push(...work.indices);
        }
        expect(all.length).toBe(expected.length);
        expect([...all].sort((a, b) => a - b)).toEqual(expected);
      }
    }
  });

  it('ends an epoch with a short step and marks epoch ends and commitEvery multiples as commit points', () => {
    const j = job({ commitEvery: 3 }, 1000); // 16 steps per epoch, the 16th has 1000 - 15·64 = 40 samples
    const w = world([0.5, 0.5]);
    const last = stepWork(j, fromStart(w), 0, 16)!;
    expect(last.count).toBe(40);
    expect(last.commitPoint).toBe(true);
    expect(last.group.after).toEqual({ epoch: 1, cursor: 0, holes: [] });
    expect(stepWork(j, fromStart(w), 1, 3)!.commitPoint).toBe(true);
    expect(stepWork(j, fromStart(w), 1, 4)!.commitPoint).toBe(false);
    expect(stepWork(j, fromStart(w), 1, 4)!.group.after).toEqual({ epoch: 0, cursor: 384, holes: [] });
    expect(stepWork(j, fromStart(w), 0, 17)).toMatchObject({ epoch: 1, ranges: [[0, 64]], count: 64 });
    expect(stepWork(j, fromStart(w), 0, 33)).toBeNull(); // the job is done after step 32
  });

  it('plans a carried group under the old split, with the lost slot’s slices as holes the next group serves first', () => {
    const j = job({ commitEvery: 2 }, 1000);
    // The group of steps 3..4 starts at cursor 128; slots 0 and 2 of three carry it on as ranks 0 and 1.
    const round = carriedRound();
    const planner = new StepPlanner(j, round, 1);
    const step3 = planner.work(3)!;
    expect(step3.ranges).toEqual([[128, 192]]);
    expect(step3.indices).toEqual(epochOrder(9, 0, 1000).subarray(160, 192)); // slot 2: the last half
    expect(step3.group).toMatchObject({ own: 64, total: 96 });
    // Slot 1's slices of steps 3 and 4 ([144, 160) and [208, 224)) are left as holes.
    expect(step3.group.after).toEqual({
      epoch: 0,
      cursor: 256,
      holes: [
        [144, 160],
        [208, 224],
      ],
    });
    // The next group is the round's own split and serves the holes first.
    const step5 = planner.work(5)!;
    expect(step5.ranges).toEqual([
      [144, 160],
      [208, 224],
      [256, 288],
    ]);
    expect(step5.indices).toEqual(epochOrder(9, 0, 1000).subarray(256, 288)); // rank 1: the second half
    expect(step5.group).toMatchObject({ own: 64, total: 128 });
  });

  it('plans a carried group whose outer sum also left a rank out: its slices are holes too, its samples out of the weights', () => {
    const j = job({ commitEvery: 2 }, 1000);
    // The same carried group (slots 0 and 2 of three as ranks 0 and 1); the outer sum leaves rank 1 (slot 2) out.
    const round = carriedRound();
    const group = new StepPlanner(j, round, 0).work(3)!.group;
    // Slot 0 computes 16 + 16 samples, slot 2 32 + 32 (hand-computed from the shares).
    expect(group.rankSamples).toEqual([32, 64]);
    expect(group.afterWithout([])).toEqual(group.after);
    // Slot 1's slices as before, and slot 2's: [160, 192) and [224, 256).
    expect(group.afterWithout([1])).toEqual({
      epoch: 0,
      cursor: 256,
      holes: [
        [144, 192],
        [208, 256],
      ],
    });
  });
});

describe('reweight (an outer sum that left ranks out)', () => {
  const group = { total: 96, rankSamples: [32, 64] } as Parameters<typeof reweight>[1];

  it('scales the survivors’ weighted sum so their weights add up to one again', () => {
    // Rank 0 alone contributed Δ·32/96: scaled by 96/32 it is Δ itself.
    const delta = new Float32Array([0.75, -3, 1.5]).map((x) => (x * 32) / 96);
    reweight(delta, group, [1]);
    expect(Array.from(delta)).toEqual([0.75, -3, 1.5].map((x) => Math.fround(Math.fround((x * 32) / 96) * 3)));
  });

  it('leaves a sum nobody was left out of as it is, and refuses one without any sample left', () => {
    const delta = new Float32Array([1, 2]);
    reweight(delta, group, []);
    expect(Array.from(delta)).toEqual([1, 2]);
    expect(() => reweight(delta, group, [0, 1])).toThrow(/every sample/);
  });
});

describe("isCheckpointCommit of a tab's groups (rank 0 snapshots these right after the commit)", () => {
  it('follows checkpointEvery, epoch ends and the job end', () => {
    const j = job({ checkpointEvery: 5 }, 1000); // 16 steps per epoch, 32 in all
    const planner = new StepPlanner(j, fromStart(world([1])), 0);
    const got: number[] = [];
    for (let step = 1; planner.work(step); step++) {
      const work = planner.work(step)!;
      if (work.commitPoint && isCheckpointCommit(work.group.span, j.checkpointEvery)) got.push(step);
    }
    expect(got).toEqual([5, 10, 15, 16, 20, 25, 30, 32]);
  });
});

describe('planCarry', () => {
  const round = { step: 5, committedHash: 'c'.repeat(64) };
  const start = { step: 4, hash: 'c'.repeat(64) };
  const cases: [string, HeldStates, ReturnType<typeof planCarry>][] = [
    [
      'nothing of the group applied: all of it',
      { live: start, backup: null },
      { kind: 'carry', from: 'start', resume: 5 },
    ],
    [
      'an inner step applied: on after it',
      { live: { step: 6, hash: NO_HASH }, backup: start },
      { kind: 'carry', from: 'live', resume: 7 },
    ],
    [
      'every inner step applied: only the outer step left',
      { live: { step: 8, hash: NO_HASH }, backup: start },
      { kind: 'carry', from: 'live', resume: 9 },
    ],
    [
      'the outer step applied with the old world: undo it, take it again',
      { live: { step: 8, hash: 'd'.repeat(64) }, backup: start },
      { kind: 'carry', from: 'revert', resume: 9 },
    ],
    [
      'an apply that failed half-way: the group again from its start',
      { live: { step: 6, hash: null }, backup: start },
      { kind: 'carry', from: 'backup', resume: 5 },
    ],
  ];
  for (const [name, held, expected] of cases) {
    it(name, () => {
      expect(planCarry(round, held, 8)).toEqual(expected);
    });
  }

  it('cannot carry on without the group’s start', () => {
    const plan = planCarry(round, { live: { step: 6, hash: NO_HASH }, backup: { step: 3, hash: 'b'.repeat(64) } }, 8);
    expect(plan.kind).toBe('impossible');
  });
});

describe('planSync', () => {
  const round = (
    stateFrom: RoundMessage['stateFrom'],
    step = 8,
    committedHash: string | null = 'aa',
  ): Pick<RoundMessage, 'step' | 'committedHash' | 'stateFrom'> => ({
    step,
    committedHash,
    stateFrom,
  });
  const held = (live: [number, string | null] | null, backup: [number, string | null] | null): HeldStates => ({
    live: live && { step: live[0], hash: live[1] },
    backup: backup && { step: backup[0], hash: backup[1] },
  });
  const checkpoint = { kind: 'checkpoint' as const, step: 7, url: '/api/checkpoints/r/7', sha256: 'ff' };

  it.each([
    ['fresh start', round({ kind: 'fresh' }, 1, null), 0, held(null, null), { kind: 'fresh' }],
    [
      'fresh start over a trained tab',
      round({ kind: 'fresh' }, 1, null),
      0,
      held([5, 'bb'], [4, 'cc']),
      { kind: 'fresh' },
    ],
    ['checkpoint held live', round(checkpoint), 1, held([7, 'aa'], [6, 'dd']), { kind: 'local', use: 'live' }],
    ['checkpoint held as backup', round(checkpoint), 1, held([8, 'ee'], [7, 'aa']), { kind: 'local', use: 'backup' }],
    ['checkpoint not held', round(checkpoint), 1, held([9, 'ee'], [8, 'ff']), checkpoint],
    ['same hash at another step is not the state', round(checkpoint), 1, held([6, 'aa'], null), checkpoint],
    [
      'root holds it live',
      round({ kind: 'peer', rank: 2 }),
      2,
      held([7, 'aa'], [6, 'bb']),
      { kind: 'send', use: 'live', holders: [2] },
    ],
    [
      'root holds it as backup',
      round({ kind: 'peer', rank: 2 }),
      2,
      held([8, 'cc'], [7, 'aa']),
      { kind: 'send', use: 'backup', holders: [2] },
    ],
    ['root does not hold it', round({ kind: 'peer', rank: 0 }), 0, held([8, 'cc'], [6, 'bb']), { kind: 'impossible' }],
    ['receiver', round({ kind: 'peer', rank: 1 }), 0, held(null, null), { kind: 'receive', holders: [1] }],
    [
      'one of several holders',
      round({ kind: 'peers', ranks: [0, 2] }),
      2,
      held([7, 'aa'], [6, 'bb']),
      { kind: 'send', use: 'live', holders: [0, 2] },
    ],
    [
      'a receiver among holders',
      round({ kind: 'peers', ranks: [0, 2] }),
      1,
      held(null, null),
      { kind: 'receive', holders: [0, 2] },
    ],
    [
      'a holder outside the world',
      round({ kind: 'peers', ranks: [0, 9] }),
      1,
      held(null, null),
      { kind: 'impossible' },
    ],
    ['everyone holds it: live', round({ kind: 'held' }), 1, held([7, 'aa'], [6, 'bb']), { kind: 'local', use: 'live' }],
    [
      'everyone holds it: the backup behind a reported step',
      round({ kind: 'held' }),
      0,
      held([8, 'cc'], [7, 'aa']),
      { kind: 'local', use: 'backup' },
    ],
    [
      'counted as holding it but does not',
      round({ kind: 'held' }),
      0,
      held([8, 'cc'], [6, 'aa']),
      { kind: 'impossible' },
    ],
    [
      'receiver that holds it still receives (the ring forwards through it)',
      round({ kind: 'peer', rank: 1 }),
      0,
      held([7, 'aa'], [7, 'aa']),
      { kind: 'receive', holders: [1] },
    ],
    [
      'step-0 state from a peer',
      round({ kind: 'peer', rank: 0 }, 1, null),
      0,
      held([0, null], null),
      { kind: 'send', use: 'live' },
    ],
  ])('%s', (_name, r, rank, h, expected) => {
    expect(planSync(r, rank, h, 4)).toMatchObject(expected);
  });

  // Local mode: the agreed tag does not cover a rank's own moments. A held state skipped the download
  // after a rollback to a checkpoint, kept its own moments, and the coordinator (which holds the next check
  // to the checkpoint's inner state) banned an honest tab for it (hostile-tabs, local mode, 2 runs in 9).
  it('a rank with its own inner state (local mode) takes the checkpoint even when it holds the tag', () => {
    expect(planSync(round(checkpoint), 1, held([7, 'aa'], [6, 'dd']), 4, true)).toEqual(checkpoint);
    expect(planSync(round(checkpoint), 1, held([8, 'ee'], [7, 'aa']), 4, true)).toEqual(checkpoint);
    // What the tab holds still serves every other source: its own inner state is what those continue.
    expect(planSync(round({ kind: 'held' }), 1, held([7, 'aa'], null), 4, true)).toEqual({
      kind: 'local',
      use: 'live',
    });
  });
});

describe('helloHolding', () => {
  it('says nothing for a new tab', () => {
    expect(helloHolding({ live: null, backup: null }, null)).toEqual({ haveStep: null, haveHash: null, pending: null });
  });
  it('offers the freshly initialised state as step 0', () => {
    expect(helloHolding({ live: { step: 0, hash: null }, backup: null }, null)).toEqual({
      haveStep: 0,
      haveHash: null,
      pending: null,
    });
  });
  it('offers the backup as committed and a newer reported live state as pending', () => {
    expect(
      helloHolding({ live: { step: 8, hash: 'bb' }, backup: { step: 7, hash: 'aa' } }, { step: 8, hash: 'bb' }),
    ).toEqual({
      haveStep: 7,
      haveHash: 'aa',
      pending: { step: 8, hash: 'bb' },
    });
  });
  it('does not offer a live state it never reported, nor one already restored away', () => {
    expect(
      helloHolding({ live: { step: 8, hash: 'bb' }, backup: { step: 7, hash: 'aa' } }, { step: 7, hash: 'aa' }).pending,
    ).toBeNull();
    expect(
      helloHolding({ live: { step: 7, hash: 'aa' }, backup: { step: 7, hash: 'aa' } }, { step: 8, hash: 'bb' }).pending,
    ).toBeNull();
  });
});

describe('failureReport', () => {
  const w = world([0.5, 0.25, 0.25]);
  it('stays silent when the round was aborted from outside', () => {
    expect(failureReport(new CollectiveError('peer_closed', 'x', { peer: 'p1' }), w, true)).toBeNull();
    expect(failureReport(new CollectiveError('aborted', 'round closed'), w, false)).toBeNull();
  });
  it('names the peer by worker id when the error names a member', () => {
    expect(failureReport(new CollectiveError('peer_closed', 'channel closed', { peer: 'p2' }), w, false)).toEqual({
      reason: 'peer_closed: channel closed',
      peer: 'w2',
    });
    expect(failureReport(new CollectiveError('timeout', 'slow', { peer: 'p9' }), w, false)).toEqual({
      reason: 'timeout: slow',
    });
  });
  it('reports other errors without a peer, cut to the protocol limit', () => {
    const r = failureReport(new Error('x'.repeat(400)), w, false)!;
    expect(r.peer).toBeUndefined();
    expect(r.reason.length).toBe(256);
  });
});

describe('ringNeighbours', () => {
  it('wraps around', () => {
    const w = world([1, 1, 1]);
    expect(ringNeighbours(w, 0)).toEqual({ left: w[2], right: w[1] });
    expect(ringNeighbours(w, 2)).toEqual({ left: w[1], right: w[0] });
  });
});
