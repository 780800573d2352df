/**
 * The commit rule: a step commits only when every rank of the round reported it with equal hashes;
 * every bad report is rejected with a reason, counted, and leaves the state untouched.
 */
import { describe, expect, it } from 'vitest';
import type { JobSpecInput } from '../../../../core/training/job';
import { PROTOCOL_VERSION } from '../../../../core/protocol/control-fields';
import type { ErrorCode } from '../../../../core/protocol/coordinator-messages';
import { MAX_CONTROL_MESSAGE_BYTES, parseClientMessage } from '../../../../core/protocol/control-parse';
import { REBALANCE_MIN_COMMITS } from '../../../../coordinator/machine/round-close';
import {
  computeShares,
  MIN_SHARE_OF_EQUAL,
  smoothThroughput,
  THROUGHPUT_SMOOTHING,
} from '../../../../coordinator/machine/shares';
import { Harness, hashOf } from './coordinator-harness';

const JOB: JobSpecInput = {
  model: 'tiny-mlp',
  globalBatch: 8,
  epochs: 1,
  minWorkers: 3,
  maxWorkers: 3,
  lastCallMs: 0,
  heartbeatMs: 60_000,
};

/** a, b, c (ranks 0..2) committed steps 1 and 2; a reported step 3; d waits (the world is full). */
function midStep(job: JobSpecInput = {}, datasetSize = 64): Harness {
  const h = new Harness({ ...JOB, ...job }, datasetSize);
  for (const n of ['a', 'b', 'c', 'd']) h.join(n);
  h.train(2);
  h.report('a');
  return h;
}

type Forgery = [string, (h: Harness) => { from: string; body: Record<string, unknown> }, ErrorCode];

function reportOf(h: Harness, name: string, overrides: Record<string, unknown> = {}) {
  const w = h.worker(name);
  const step = w.live + 1;
  return {
    type: 'step_report',
    runId: h.runId,
    workerId: w.workerId,
    round: h.state.rendezvous.round,
    rank: h.state.rendezvous.participants.find((p) => p.workerId === w.workerId)?.rank ?? 0,
    step,
    hash: hashOf(step),
    lossSum: 1,
    samples: 3,
    computeMs: 5,
    ...overrides,
  };
}

const forgeries: Forgery[] = [
  [
    'a report with another run id is rejected as wrong_run',
    (h) => ({ from: 'b', body: reportOf(h, 'b', { runId: 'run-0' }) }),
    'wrong_run',
  ],
  [
    "a report carrying another worker's id is rejected as forged_worker",
    (h) => ({ from: 'b', body: reportOf(h, 'b', { workerId: h.worker('c').workerId }) }),
    'forged_worker',
  ],
  [
    'a report from a worker outside the round is rejected as not_member',
    (h) => ({ from: 'd', body: reportOf(h, 'd', { step: 3 }) }),
    'not_member',
  ],
  [
    'a report claiming another rank is rejected as forged_rank',
    (h) => ({ from: 'b', body: reportOf(h, 'b', { rank: 0 }) }),
    'forged_rank',
  ],
  [
    'a report for an old round is rejected as stale_round',
    (h) => ({ from: 'b', body: reportOf(h, 'b', { round: 0 }) }),
    'stale_round',
  ],
  [
    'a report for a future round is rejected as stale_round',
    (h) => ({ from: 'b', body: reportOf(h, 'b', { round: 7 }) }),
    'stale_round',
  ],
  [
    'a report for a committed step is rejected as stale_step',
    (h) => ({ from: 'b', body: reportOf(h, 'b', { step: 1, hash: hashOf(1) }) }),
    'stale_step',
  ],
  [
    'a report skipping a step is rejected as wrong_step',
    (h) => ({ from: 'b', body: reportOf(h, 'b', { step: 4, hash: hashOf(4) }) }),
    'wrong_step',
  ],
  [
    'a second report of the same step is rejected as duplicate_report',
    (h) => ({ from: 'a', body: reportOf(h, 'a', { step: 3, hash: hashOf(3) }) }),
    'duplicate_report',
  ],
  [
    'a report with a sample count other than its slice is rejected as bad_samples',
    (h) => ({ from: 'b', body: reportOf(h, 'b', { samples: 8 }) }),
    'bad_samples',
  ],
];

describe('commit rule: rejected reports leave the state untouched', () => {
  for (const [name, forge, code] of forgeries) {
    it(name, () => {
      const h = midStep();
      const { from, body } = forge(h);
      const before = h.state;
      const snapshot = JSON.stringify(before);
      const actions = h.apply({
        kind: 'message',
        conn: h.worker(from).conn,
        msg: { v: PROTOCOL_VERSION, ...body } as never,
      });
      expect(h.state).toBe(before);
      expect(JSON.stringify(h.state)).toBe(snapshot);
      expect(actions.map((a) => a.kind)).toEqual(['send', 'metric', 'log']);
      expect(actions[0]).toMatchObject({ kind: 'send', conn: h.worker(from).conn, msg: { type: 'error', code } });
      expect(actions[1]).toEqual({ kind: 'metric', name: 'tabswarm_message_errors_total', value: 1, labels: { code } });
      // The honest ranks still commit step 3.
      h.report('b');
      h.report('c');
      expect(h.state.lastCommit.step).toBe(3);
    });
  }

  it('a report on a socket that never said hello is rejected as not_joined', () => {
    const h = midStep();
    h.connect('x');
    const before = h.state;
    h.apply({ kind: 'message', conn: h.worker('x').conn, msg: { v: 1, ...reportOf(h, 'b') } as never });
    expect(h.state).toBe(before);
    expect(h.lastReceived('x')).toMatchObject({ type: 'error', code: 'not_joined' });
  });

  const frames: [string, string, string][] = [
    ['an overflowing number literal (1e999 parses to Infinity) is rejected', '"lossSum":1e999', 'bad_message'],
    ['a negative sample count is rejected', '"samples":-1', 'bad_message'],
    ['an unknown field is rejected', '"extra":1', 'bad_message'],
  ];
  for (const [name, patch, code] of frames) {
    it(`${name} (${code}) before it reaches the rule`, () => {
      const h = midStep();
      const body = JSON.stringify({ v: 1, ...reportOf(h, 'b', { samples: 3 }) });
      const key = patch.split(':')[0];
      const text = body.includes(key)
        ? body.replace(new RegExp(`${key}:[^,}]*`), patch)
        : body.replace(/}$/, `,${patch}}`);
      const parsed = parseClientMessage(text);
      expect(parsed.ok).toBe(false);
      if (parsed.ok) return;
      expect(parsed.code).toBe(code);
      const before = h.state;
      h.apply({ kind: 'invalid', conn: h.worker('b').conn, code: parsed.code, message: parsed.message });
      expect(h.state).toBe(before);
      expect(h.lastReceived('b')).toMatchObject({ type: 'error', code });
      expect(h.metricCount('tabswarm_message_errors_total', { code })).toBe(1);
    });
  }

  it('an oversized frame is rejected as too_large', () => {
    const parsed = parseClientMessage(
      JSON.stringify({ v: 1, type: 'heartbeat', runId: 'r', workerId: 'x'.repeat(MAX_CONTROL_MESSAGE_BYTES) }),
    );
    expect(parsed).toMatchObject({ ok: false, code: 'too_large' });
  });
});

describe('commit rule: commits', () => {
  it('commits a step only when every rank reported it, persisted before anyone hears of it', () => {
    const h = midStep();
    expect(h.report('b').some((a) => a.kind === 'record_commit')).toBe(false);
    const actions = h.report('c');
    const kinds = actions.map((a) => (a.kind === 'send' ? `send:${a.msg.type}` : a.kind));
    expect(kinds.indexOf('record_commit')).toBeLessThan(kinds.indexOf('persist'));
    expect(kinds.indexOf('persist')).toBeLessThan(kinds.indexOf('send:committed'));
    const commit = actions.find((a) => a.kind === 'record_commit');
    expect(commit).toEqual({
      kind: 'record_commit',
      commit: {
        step: 3,
        firstStep: 3,
        epoch: 0,
        cursorStart: 16,
        count: 8,
        hash: hashOf(3),
        round: 1,
        world: h.state.rendezvous.participants.map(({ workerId, rank, share }) => ({ workerId, rank, share })),
        loss: 0.5,
      },
    });
    for (const n of ['a', 'b', 'c'])
      expect(h.lastReceived(n)).toEqual({
        v: 1,
        type: 'committed',
        round: 1,
        step: 3,
        epoch: 0,
        cursor: 24,
        hash: hashOf(3),
      });
    expect(h.received('d', 'committed')).toEqual([]);
  });

  it('treats different hashes for one step as divergence: the round closes with restore:true and a restart', () => {
    const h = midStep();
    const actions = h.report('b', { hash: 'f'.repeat(64) });
    expect(actions.find((a) => a.kind === 'send' && a.conn === h.worker('b').conn)).toMatchObject({
      msg: { type: 'error', code: 'hash_mismatch' },
    });
    for (const n of ['a', 'b', 'c'])
      expect(h.received(n, 'round_closed').pop()).toMatchObject({ reason: 'divergence', restore: true });
    expect(h.state.restarts).toBe(1);
    expect(h.state.lastCommit.step).toBe(2);
    expect(h.logs.some((l) => l.event === 'divergence' && l.level === 'error')).toBe(true);
    expect(h.commits.map((c) => c.step)).toEqual([1, 2]);
  });

  it('groups commitEvery steps into one commit; ranks may run ahead within the window but not past the commit point', () => {
    const h = new Harness({ ...JOB, commitEvery: 3 }, 64); // 8 steps: commit points 3, 6, 8
    for (const n of ['a', 'b', 'c']) h.join(n);
    h.readyAll();
    for (let i = 0; i < 3; i++) h.report('a');
    expect(h.report('a')).toEqual(
      expect.arrayContaining([expect.objectContaining({ msg: expect.objectContaining({ code: 'wrong_step' }) })]),
    );
    for (let i = 0; i < 3; i++) h.report('b');
    h.report('c');
    h.report('c');
    expect(h.state.lastCommit.step).toBe(0);
    h.report('c');
    expect(h.commits).toEqual([expect.objectContaining({ firstStep: 1, step: 3, cursorStart: 0, count: 24 })]);
    for (let i = 0; i < 3; i++) for (const n of ['a', 'b', 'c']) h.report(n);
    for (let i = 0; i < 2; i++) for (const n of ['a', 'b', 'c']) h.report(n);
    expect(h.commits.map((c) => [c.firstStep, c.step, c.count])).toEqual([
      [1, 3, 24],
      [4, 6, 24],
      [7, 8, 16],
    ]);
    expect(h.state.status).toBe('done');
  });

  it('ends every epoch with a commit of the short last step; the next epoch uses its own order', () => {
    const h = new Harness({ ...JOB, epochs: 2, commitEvery: 5 }, 20); // steps of 8, 8, 4 per epoch
    for (const n of ['a', 'b', 'c']) h.join(n);
    h.readyAll();
    for (let i = 0; i < 3; i++) for (const n of ['a', 'b', 'c']) h.report(n);
    expect(h.commits).toEqual([expect.objectContaining({ firstStep: 1, step: 3, epoch: 0, count: 20 })]);
    expect(h.state.record).toMatchObject({ epoch: 1, cursor: 0, processedCount: 0 });
    expect(h.received('a', 'checkpoint_request').pop()).toMatchObject({ step: 3 });
    for (let i = 0; i < 3; i++) for (const n of ['a', 'b', 'c']) h.report(n);
    // Commit points count within each epoch (an epoch of 3 steps never reaches a 5th): only epoch ends.
    expect(h.commits.map((c) => [c.epoch, c.firstStep, c.step, c.cursorStart, c.count])).toEqual([
      [0, 1, 3, 0, 20],
      [1, 4, 6, 0, 20],
    ]);
  });

  it('gives a rank twice as fast about twice the share in the next round, and slices follow the shares', () => {
    const h = new Harness({ ...JOB, minWorkers: 2, maxWorkers: 3, globalBatch: 30 }, 600);
    h.join('a');
    h.join('b');
    h.readyAll();
    // The coordinator measures each rank from the step's start to its report; claims are ignored.
    const step = () => {
      h.advance(5);
      h.report('a', { computeMs: 50 });
      h.advance(5);
      h.report('b', { computeMs: 1e-6 });
    };
    for (let i = 0; i < 4; i++) step();
    h.join('c'); // admitted at the next boundary: a new round with measured shares
    step();
    const world = h.received('c', 'round').pop()!.world;
    const [a, b, c] = world.map((e) => e.share);
    expect(a / b).toBeCloseTo(2, 1);
    expect(c).toBeCloseTo((a + b) / 2, 2); // unmeasured: the mean
    h.readyAll();
    const before = h.state;
    h.report('b', { samples: 10 }); // an equal split is no longer b's slice
    expect(h.state).toBe(before);
    expect(h.lastReceived('b')).toMatchObject({ type: 'error', code: 'bad_samples' });
    h.stepAll();
    expect(h.commits.pop()).toMatchObject({ count: 30, round: 2 });
  });

  it(`re-measures shares at a commit boundary after ${REBALANCE_MIN_COMMITS} commits when they drifted`, () => {
    const h = new Harness({ ...JOB, minWorkers: 2, maxWorkers: 2, globalBatch: 8 }, 8 * (REBALANCE_MIN_COMMITS + 5));
    h.join('a');
    h.join('b');
    h.readyAll();
    const step = () => {
      h.advance(1);
      h.report('a');
      h.advance(3);
      h.report('b');
    };
    for (let i = 0; i < REBALANCE_MIN_COMMITS - 1; i++) step();
    expect(h.state.rendezvous.round).toBe(1);
    step();
    expect(h.received('a', 'round_closed').pop()).toMatchObject({ reason: 'rebalance', restore: false });
    const [a, b] = h
      .received('a', 'round')
      .pop()!
      .world.map((e) => e.share);
    expect(a / b).toBeCloseTo(4, 1);
    expect(h.state.restarts).toBe(0);
  });
});

describe('throughput shares', () => {
  it('ignore a tab that claims to compute in no time (the 0.95 share of the issue)', () => {
    const h = new Harness({ ...JOB, minWorkers: 2, maxWorkers: 3, globalBatch: 30 }, 600);
    h.join('a');
    h.join('b');
    h.readyAll();
    for (let i = 0; i < 4; i++) {
      h.advance(10);
      h.report('a', { computeMs: 1e-6 });
      h.report('b', { computeMs: 10 });
    }
    h.join('c');
    h.advance(10);
    h.report('a', { computeMs: 1e-6 });
    h.report('b', { computeMs: 10 });
    const [a, b] = h
      .received('c', 'round')
      .pop()!
      .world.map((e) => e.share);
    expect(a / b).toBeCloseTo(1, 5);
  });

  it('are capped at twice the equal share, the excess spread over the others', () => {
    const shares = computeShares([1000, 1, 1, 1]);
    expect(shares[0]).toBeCloseTo(0.5, 6);
    expect(shares.slice(1).every((x) => Math.abs(x - 0.5 / 3) < 1e-6)).toBe(true);
    expect(shares.reduce((x, y) => x + y, 0)).toBeCloseTo(1, 5);
    const three = computeShares([1e9, 1, 1e-9]);
    expect(three[0]).toBeCloseTo(2 / 3, 5);
    expect(three[2]).toBeCloseTo(0.1 / 3, 5); // the floor still holds
  });

  it('are equal before any measurement and sum to 1', () => {
    expect(computeShares([null, null, null, null])).toEqual([0.25, 0.25, 0.25, 0.25]);
    expect(computeShares([])).toEqual([]);
  });

  it('follow measured throughput, count the unmeasured as the mean, and never starve a slow rank', () => {
    const [fast, slow, unknown] = computeShares([3, 1, null]);
    expect(fast / slow).toBeCloseTo(3, 3);
    expect(unknown).toBeCloseTo((fast + slow) / 2, 5);
    const starving = computeShares([1000, 1e-6]);
    expect(starving[1]).toBeGreaterThanOrEqual(MIN_SHARE_OF_EQUAL / 2 - 1e-6);
    for (const shares of [computeShares([3, 1, null]), starving, computeShares([0.7, 0.2, 5, 1, 1, 9, 0.01])]) {
      expect(Math.abs(shares.reduce((a, b) => a + b, 0) - 1)).toBeLessThan(1e-5);
    }
  });

  it('smooth each measurement into the previous one and ignore empty slices', () => {
    expect(smoothThroughput(null, 10, 5)).toBe(2);
    expect(smoothThroughput(2, 40, 10)).toBeCloseTo(2 + THROUGHPUT_SMOOTHING * 2, 12);
    expect(smoothThroughput(2, 0, 10)).toBe(2);
    expect(smoothThroughput(2, 10, 0)).toBe(2);
  });
});
