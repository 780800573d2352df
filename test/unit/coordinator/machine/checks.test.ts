/**
 * Recomputed spot checks in the machine (coordinator/machine/checks.ts, check-events.ts,
 * adaptive-trust.ts): the draw and its fresh secret per draw, who uploads, several checks in flight,
 * the gate that holds commits behind an unresolved check, withheld uploads (deadline on the executor's
 * timer, an uploader that leaves, a refused upload), a job whose last step waits for its checks, the
 * bans and cool-offs of a caught liar's address and invite, and the rates of adaptive trust. The machine
 * runs in the product's executor (coordinator-harness.ts) with its invariants checked after every
 * event; sketches are synthetic (verify-kit.ts).
 */
import { describe, expect, it } from 'vitest';
import type { JobSpecInput } from '../../../../core/training/job';
import { RECOMPUTE_TOLERANCE } from '../../../../core/state/sketch';
import { checkRate, SUSPECT_PROBABILITY } from '../../../../coordinator/machine/adaptive-trust';
import {
  checkDraw,
  judge,
  SENSITIVITY_MARGIN,
  sensitivityOf,
  uploadDeadlineMs,
  VERIFY_GATE_COMMITS,
} from '../../../../coordinator/machine/checks';
import { MAX_INCONCLUSIVE_ROLLBACKS } from '../../../../coordinator/machine/check-events';
import { nextDeadline } from '../../../../coordinator/machine/machine';
import type { RecomputedStep } from '../../../../coordinator/machine/state';
import { evaluationReport, Harness } from './coordinator-harness';
import { recomputed, selectedStep, verifiedStep } from './verify-kit';

const JOB: JobSpecInput = {
  model: 'tiny-mlp',
  globalBatch: 12,
  epochs: 3,
  minWorkers: 3,
  maxWorkers: 3,
  lastCallMs: 0,
  heartbeatMs: 600_000,
  checkpointEvery: 4,
};

/** A job checking every commit at `p`, newcomers included. */
const at = (p: number): JobSpecInput => ({
  ...JOB,
  verify: { probability: p, newcomer: { probability: p, checks: 0 } },
});

function swarm(job: JobSpecInput, salt: string, addrs: Record<string, string> = {}): Harness {
  const h = new Harness(job, 96, 'run-1', undefined, { verifySalt: salt });
  for (const n of ['a', 'b', 'c']) h.join(n, { addr: addrs[n] ?? `10.0.0.${n.charCodeAt(0)}` });
  h.readyAll();
  return h;
}

/** Every member reports its next step honestly; a closed round is re-formed first. */
function step(h: Harness, tamper?: Parameters<typeof verifiedStep>[1]): void {
  if (h.state.rendezvous.phase !== 'training' && h.state.status === 'active') h.readyAll();
  verifiedStep(h, tamper);
}

const uploaderName = (h: Harness, id = h.state.checks![0].uploader) => h.nameOf(id);

describe('the draw', () => {
  it('checks about p of the commits, each draw from its own secret (the same steps after a rollback are drawn anew)', () => {
    const picked = (salt: string, seq0: number) =>
      Array.from({ length: 20_000 }, (_, i) => checkDraw(salt, seq0 + i, i + 1) < 0.05);
    const first = picked('salt', 0);
    const rate = first.filter(Boolean).length / first.length;
    expect(rate).toBeGreaterThan(0.045);
    expect(rate).toBeLessThan(0.055);
    // The same step numbers drawn again with later draw numbers (as after a rollback): unrelated.
    const again = picked('salt', 20_000);
    const both = first.filter((x, i) => x && again[i]).length / first.length;
    expect(both).toBeLessThan(0.005); // independent: ≈ 0.05² = 0.0025
  });

  it('a rollback does not rewind the draws: the steps checked the second time are not the first time’s', () => {
    const salt = 'rewind';
    const h = swarm(at(0.3), salt);
    const firstPass: number[] = [];
    while (h.state.lastCommit.step < 12) {
      step(h);
      for (const c of h.state.checks ?? []) if (!firstPass.includes(c.step)) firstPass.push(c.step);
      for (const c of h.state.checks ?? [])
        h.apply({ kind: 'verification_result', check: c.id, result: recomputed(c.step, 3) });
    }
    const seq = h.state.drawSeq!;
    expect(seq).toBe(12);
    // Draws go on from 12, whatever the steps.
    const secondPass = Array.from({ length: 12 }, (_, i) => i + 1).filter((s, i) => checkDraw(salt, seq + i, s) < 0.3);
    expect(secondPass).not.toEqual(firstPass);
  });
});

describe('a check, from the draw to its verdict', () => {
  const salt = 'spot-check-salt';

  it('the most trusted member uploads with its committed; an honest step passes and credits every member', () => {
    const h = swarm(at(0.3), salt);
    const target = selectedStep(salt, 0.3);
    while (h.state.lastCommit.step < target) step(h);
    const v = h.state.checks![0];
    expect(v.step).toBe(target);
    const committed = h.received(uploaderName(h), 'committed').at(-1)!;
    expect(committed.upload?.step).toBe(target - 1);
    expect(committed.upload?.url).toMatch(new RegExp(`^/api/verify/run-1/${v.id}\\?token=[0-9a-f]{32}$`));
    for (const name of ['a', 'b', 'c'].filter((n) => n !== uploaderName(h)))
      expect(h.received(name, 'committed').some((m) => m.upload)).toBe(false);
    h.apply({ kind: 'verification_upload', check: v.id, ok: true });
    expect(h.state.checks![0].phase).toBe('recompute');
    h.apply({ kind: 'verification_result', check: v.id, result: recomputed(target, 3) });
    expect(h.state.checks).toEqual([]);
    expect(h.logs.find((l) => l.event === 'verification_done')?.data.cheaters).toEqual([]);
    for (const w of h.state.rendezvous.participants) expect(h.state.trust?.[`w:${w.workerId}`]?.passed).toBe(1);
    // The next check's uploader is again the most trusted: all tie at one pass, so any of them.
  });

  it('holds commits once a check is VERIFY_GATE_COMMITS behind, with several checks in flight, and goes on when they resolve', () => {
    const h = swarm(at(0.5), salt);
    while (h.state.lastCommit.step < 20 && h.logs.every((l) => l.event !== 'commit_held')) step(h);
    const held = h.state.lastCommit.step;
    const oldest = h.state.checks![0];
    expect(h.state.checks!.length).toBeGreaterThan(1);
    expect(held - oldest.step).toBe(VERIFY_GATE_COMMITS);
    // Every rank reported the next step; it is not committed, and a tick does not change that.
    expect(h.state.rendezvous.participants.every((p) => p.lastStep === held + 1)).toBe(true);
    h.advance(1000);
    expect(h.state.lastCommit.step).toBe(held);
    for (const c of [...h.state.checks!]) {
      h.apply({ kind: 'verification_upload', check: c.id, ok: true });
      h.apply({ kind: 'verification_result', check: c.id, result: recomputed(c.step, 3) });
    }
    expect(h.state.lastCommit.step).toBe(held + 1);
  });

  it('a liar is caught by the recomputation: banned, rolled back past its first contribution', () => {
    const h = swarm(at(0.3), salt);
    const target = selectedStep(salt, 0.3);
    const liar = h.members()[1];
    while (h.state.lastCommit.step < target)
      step(h, (own, params) => ({ own: own.map((o, r) => (r === 1 ? o.map((x) => x * 1000) : o)), params }));
    const v = h.state.checks![0];
    h.apply({ kind: 'verification_upload', check: v.id, ok: true });
    h.apply({ kind: 'verification_result', check: v.id, result: recomputed(target, 3) });
    expect(h.logs.find((l) => l.event === 'cheater_banned')?.data.workers).toEqual([h.worker(liar).workerId]);
    expect(h.isConnected(liar)).toBe(false);
    expect(h.state.lastCommit.step).toBe(0);
    expect(h.state.status).toBe('active');
  });

  it('a verdict of lies waits for the checks of earlier steps: a lie found there rolls both back, and the honest rank is not blamed', () => {
    const h = swarm(at(1), salt);
    const liar = h.members()[1];
    // Honest at steps 1–2; rank 1 lies from step 3 on (every commit is checked at p = 1).
    while (h.state.lastCommit.step < 5)
      step(h, (own, params) =>
        h.state.lastCommit.step + 1 >= 3
          ? { own: own.map((o, r) => (r === 1 ? o.map((x) => -x) : o)), params }
          : { own, params },
      );
    const byStep = (n: number) => h.state.checks!.find((c) => c.step === n)!;
    for (const n of [1, 2]) {
      h.apply({ kind: 'verification_upload', check: byStep(n).id, ok: true });
      h.apply({ kind: 'verification_result', check: byStep(n).id, result: recomputed(n, 3) });
    }
    // Step 5's recomputation, from a state step 3's lie poisoned, disagrees with honest rank 0 too.
    const later = byStep(5);
    const poisoned = recomputed(5, 3);
    poisoned.own[0] = { ...poisoned.own[0], values: poisoned.own[0].values.map((x) => x + 0.5) };
    h.apply({ kind: 'verification_upload', check: later.id, ok: true });
    h.apply({ kind: 'verification_result', check: later.id, result: poisoned });
    expect(h.logs.at(-1)).toMatchObject({ event: 'verification_held', data: { check: later.id, step: 5 } });
    expect(h.logs.some((l) => l.event === 'cheater_banned')).toBe(false);
    expect(h.state.checks!.find((c) => c.id === later.id)?.phase).toBe('held');
    // Step 3's check finds the liar: banned, the record rolled back past step 3, step 5's verdict dropped.
    h.apply({ kind: 'verification_upload', check: byStep(3).id, ok: true });
    h.apply({ kind: 'verification_result', check: byStep(3).id, result: recomputed(3, 3) });
    const bans = h.logs.filter((l) => l.event === 'cheater_banned');
    expect(bans.map((b) => b.data.workers)).toEqual([[h.worker(liar).workerId]]);
    expect(h.state.lastCommit.step).toBeLessThan(3);
    expect(h.state.checks?.some((c) => c.id === later.id)).toBe(false);
  });

  it('a held verdict is given once the earlier checks pass', () => {
    const h = swarm(at(1), salt);
    const liar = h.members()[2];
    while (h.state.lastCommit.step < 3)
      step(h, (own, params) =>
        h.state.lastCommit.step + 1 === 3
          ? { own: own.map((o, r) => (r === 2 ? o.map((x) => x * 3) : o)), params }
          : { own, params },
      );
    const [first, second, third] = h.state.checks!;
    h.apply({ kind: 'verification_upload', check: third.id, ok: true });
    h.apply({ kind: 'verification_result', check: third.id, result: recomputed(3, 3) });
    expect(h.state.checks!.find((c) => c.id === third.id)?.phase).toBe('held');
    for (const c of [second, first]) {
      h.apply({ kind: 'verification_upload', check: c.id, ok: true });
      h.apply({ kind: 'verification_result', check: c.id, result: recomputed(c.step, 3) });
    }
    expect(h.logs.find((l) => l.event === 'cheater_banned')?.data.workers).toEqual([h.worker(liar).workerId]);
    expect(h.state.checks?.some((c) => c.id === third.id) ?? false).toBe(false);
  });

  it('judges local checks by the rank’s contribution and moments, and the round by the outer step', () => {
    const world = ['a', 'b'].map((workerId, rank) => ({ workerId, rank, share: 1, addr: '', invite: null }));
    const pair = (v: number[]) => ({ values: v, mass: v.map((x) => Math.abs(x) + 1) });
    const r: RecomputedStep = {
      own: [pair([1, 2])],
      params: pair([3, 4]),
      outer: pair([5, 6]),
      moments: [pair([7, 8]), pair([9, 10])],
      startOk: true,
    };
    const claims = {
      own: [[1, 2]],
      params: [3, 4],
      outer: [5, 6],
      moments: [
        [7, 8],
        [9, 10],
      ],
    };
    const v = { world, ranks: [1], uploader: 'b', claims, mode: 'local' as const };
    expect(judge(v, r).cheaters).toEqual([]);
    expect(
      judge(
        {
          ...v,
          claims: {
            ...claims,
            moments: [
              [7, 8],
              [9, 11],
            ],
          },
        },
        r,
      ).cheaters,
    ).toEqual(['b']);
    expect(judge({ ...v, claims: { ...claims, own: [[1, 2.5]] } }, r).cheaters).toEqual(['b']);
    expect(judge({ ...v, claims: { ...claims, outer: [5, 7] } }, r).cheaters).toEqual(['a', 'b']);
    expect(judge(v, { ...r, startOk: false }).cheaters).toEqual(['b']);
    const close = { ...claims, own: [[1 * (1 + RECOMPUTE_TOLERANCE / 10), 2]] };
    expect(judge({ ...v, claims: close }, r).cheaters).toEqual([]);
  });
});

describe('a chaotic state: inconclusive, not a lie', () => {
  const salt = 'chaos-salt';
  /** Rank 0's own contribution off by `by` (relative to its bucket masses' scale) in the verifier's answer. */
  const offBy = (step: number, by: number): RecomputedStep => {
    const r = recomputed(step, 3);
    r.own[0] = { ...r.own[0], values: r.own[0].values.map((x, i) => x + by * r.own[0].mass[i]) };
    return r;
  };

  it('judge: a miss within SENSITIVITY_MARGIN × what rounding alone does is inconclusive; beyond it, or where rounding does nothing, a lie', () => {
    const h = swarm(at(1), salt);
    step(h);
    const v = h.state.checks![0];
    const miss = 1e-2;
    expect(judge(v, offBy(1, miss))).toMatchObject({ cheaters: [h.worker('a').workerId], inconclusive: false });
    expect(judge(v, { ...offBy(1, miss), sensitivity: 1e-7 }).cheaters).toHaveLength(1);
    expect(judge(v, { ...offBy(1, miss), sensitivity: miss / 2 })).toMatchObject({ cheaters: [], inconclusive: true });
    expect(judge(v, { ...offBy(1, miss), sensitivity: miss / (2 * SENSITIVITY_MARGIN) }).cheaters).toHaveLength(1);
    expect(judge(v, { ...recomputed(1, 3), sensitivity: 1 })).toMatchObject({ cheaters: [], inconclusive: false });
  });

  it('sensitivityOf: the worst ratio between the two recomputations', () => {
    const a = recomputed(3, 3);
    expect(sensitivityOf('every-step', a, a)).toBe(0);
    const b = {
      ...a,
      own: a.own.map((o, r) => (r === 2 ? { ...o, values: o.values.map((x, i) => x + 0.5 * o.mass[i]) } : o)),
    };
    expect(sensitivityOf('every-step', a, b)).toBeCloseTo(0.5, 6);
  });

  it('bans nobody, rolls back to the checkpoint before the newest state a check reproduced, and doubts every member', () => {
    const h = swarm(at(1), salt);
    for (let n = 1; n <= 6; n++) {
      step(h);
      if (n === 4) h.apply({ kind: 'checkpoint_stored', step: 4, epoch: 0, cursor: 48, sha256: 'ab'.repeat(32) });
    }
    const byStep = (n: number) => h.state.checks!.find((c) => c.step === n)!;
    // Steps 1–5 pass: the newest start a check reproduced is step 4 (the check of step 5).
    for (const n of [1, 2, 3, 4, 5])
      h.apply({ kind: 'verification_result', check: byStep(n).id, result: recomputed(n, 3) });
    expect(h.state.soundStart).toBe(4);
    const members = h.members().map((n) => h.worker(n).workerId!);
    h.apply({ kind: 'verification_result', check: byStep(6).id, result: { ...offBy(6, 1e-2), sensitivity: 1e-2 } });
    expect(h.logs.some((l) => l.event === 'cheater_banned')).toBe(false);
    expect(h.logs.find((l) => l.event === 'verification_inconclusive')?.data).toMatchObject({
      step: 6,
      rolledBackTo: 4,
    });
    expect(h.state.lastCommit.step).toBe(4);
    for (const id of members) expect(checkRate(h.state, id)).toBe(SUSPECT_PROBABILITY);
    expect(h.metricCount('tabswarm_verifications_total', { result: 'inconclusive' })).toBe(1);
  });

  it('rolls back to one target at most MAX_INCONCLUSIVE_ROLLBACKS times (a job whose own training is chaotic), then only logs', () => {
    const h = swarm(at(1), salt);
    const rollbacks = () => h.logs.filter((l) => l.event === 'record_rolled_back').length;
    for (let k = 0; k <= MAX_INCONCLUSIVE_ROLLBACKS; k++) {
      step(h);
      step(h);
      for (const c of [...h.state.checks!].sort((x, y) => x.step - y.step))
        h.apply({
          kind: 'verification_result',
          check: c.id,
          result: c.step === 1 ? recomputed(1, 3) : { ...offBy(c.step, 1e-2), sensitivity: 1e-2 },
        });
    }
    const logged = h.logs.filter((l) => l.event === 'verification_inconclusive');
    expect(logged.map((l) => l.data.rolledBackTo)).toEqual([
      ...Array.from({ length: MAX_INCONCLUSIVE_ROLLBACKS }, () => 0),
      null,
    ]);
    expect(rollbacks()).toBe(MAX_INCONCLUSIVE_ROLLBACKS);
    expect(h.logs.some((l) => l.event === 'cheater_banned')).toBe(false);
  });
});

describe('an upload that does not come', () => {
  const salt = 'withheld-salt';

  it('a missed deadline, judged on the executor’s timer: the uploader banned, the others struck, the record rolled back', () => {
    const h = swarm(at(0.3), salt);
    const target = selectedStep(salt, 0.3);
    while (h.state.lastCommit.step < target) step(h);
    const v = h.state.checks![0];
    expect(v.deadline).toBe(h.now + uploadDeadlineMs(h.state.job));
    // The machine's next deadline is the upload's, whatever heartbeats keep arriving.
    expect(nextDeadline(h.state)).toBe(v.deadline);
    for (let i = 0; i < 3; i++) step(h);
    h.advance(v.deadline - h.now);
    expect(h.logs.some((l) => l.event === 'verification_withheld')).toBe(true);
    expect(h.logs.find((l) => l.event === 'cheater_banned')?.data.workers).toEqual([v.uploader]);
    const struck = h.logs.filter((l) => l.event === 'charged' && String(l.data.why).includes('withheld'));
    expect(struck.map((l) => l.data.workerId).sort()).toEqual(
      v.world
        .map((m) => m.workerId)
        .filter((w) => w !== v.uploader)
        .sort(),
    );
    expect(h.state.lastCommit.step).toBeLessThan(target);
    expect(h.state.checks).toEqual([]);
    // An upload arriving now finds nothing to do.
    const before = h.state;
    h.apply({ kind: 'verification_upload', check: v.id, ok: true });
    expect(h.state.checks).toEqual(before.checks);
  });

  /** Three members on one address (a test machine's tabs, or a household): a charge would reach them all. */
  const SHARED = { a: '127.0.0.1', b: '127.0.0.1', c: '127.0.0.1' };

  for (const [how, leave] of [
    [
      'says goodbye',
      (h: Harness, name: string, id: string) => h.send(name, { type: 'goodbye', runId: h.runId, workerId: id }),
    ],
    ['drops its socket (a crash)', (h: Harness, name: string) => h.disconnect(name)],
  ] as const) {
    it(`an uploader that ${how} before uploading: nobody banned or charged, its unverified commits rolled back, the next tab from its address admitted at once`, () => {
      const h = swarm(at(0.3), salt, SHARED);
      const target = selectedStep(salt, 0.3);
      while (h.state.lastCommit.step < target) step(h);
      const v = h.state.checks![0];
      leave(h, uploaderName(h), v.uploader);
      expect(nextDeadline(h.state)).toBe(0);
      h.advance(5);
      const departed = h.logs.find((l) => l.event === 'verification_departed');
      expect(departed?.data).toMatchObject({ check: v.id, step: v.step, uploader: v.uploader, rolledBackTo: 0 });
      // No checkpoint was stored: back to the start, past every commit nobody vouched for.
      expect(h.state.lastCommit.step).toBe(0);
      expect(h.state.checks).toEqual([]);
      for (const event of ['verification_withheld', 'cheater_banned', 'place_cooled_off', 'cooled_off'])
        expect(h.logs.filter((l) => l.event === event)).toEqual([]);
      // A crash is a failure (a restart's strike, as any crash); leaving is never a charge for cheating.
      expect(h.logs.filter((l) => l.event === 'charged' && l.data.why !== 'restart')).toEqual([]);
      expect(h.state.penalties['a:127.0.0.1']?.bannedUntil ?? 0).toBeLessThanOrEqual(h.now);
      // A new tab from the same address joins and trains now, not after a cool-off.
      h.join('d', { addr: '127.0.0.1' });
      expect(h.logs.filter((l) => l.event === 'worker_refused')).toEqual([]);
      step(h);
      expect(h.members()).toContain('d');
      expect(h.state.lastCommit.step).toBe(1);
    });
  }

  it('a refused upload (not the committed state) bans the uploader', () => {
    const h = swarm(at(0.3), salt);
    const target = selectedStep(salt, 0.3);
    while (h.state.lastCommit.step < target) step(h);
    const v = h.state.checks![0];
    h.apply({ kind: 'verification_upload', check: v.id, ok: false, reason: 'hash mismatch' });
    expect(h.logs.find((l) => l.event === 'cheater_banned')?.data.workers).toEqual([v.uploader]);
  });
});

describe('the job’s last step waits for its checks', () => {
  const short: JobSpecInput = { ...at(1), epochs: 1, globalBatch: 48 }; // 2 steps, every commit checked

  it('is not done while a check is open; done when it passes', () => {
    const h = swarm(short, 'end');
    step(h);
    const first = h.state.checks![0];
    h.apply({ kind: 'verification_result', check: first.id, result: recomputed(1, 3) });
    step(h);
    expect(h.state.lastCommit.step).toBe(2);
    expect(h.state.status).toBe('active');
    expect(h.received('a', 'done')).toEqual([]);
    const last = h.state.checks![0];
    h.apply({ kind: 'verification_result', check: last.id, result: recomputed(2, 3) });
    expect(h.state.status).toBe('done');
    expect(h.received('a', 'done').length).toBe(1);
  });

  it('no new round after the last commit while its checks are open; ranks 0 and 1 of the committing round may report its evaluation after a member left, another round opened and the check ended the job', () => {
    const h = swarm({ ...short, maxWorkers: 4 }, 'end');
    step(h);
    h.apply({ kind: 'verification_result', check: h.state.checks![0].id, result: recomputed(1, 3) });
    const round = h.state.rendezvous.round;
    const [rank0, rank1, rank2] = h.members();
    h.join('d');
    step(h);
    // Nothing is left to train: the newcomer is not admitted, the round stays while the last check is open.
    expect(h.state.lastCommit.step).toBe(2);
    expect(h.state.rendezvous.round).toBe(round);
    expect(h.state.status).toBe('active');
    // Rank 2 leaves: the round closes, and the newcomer makes up another (it syncs; nothing is left to train).
    h.send(rank2, { type: 'goodbye', runId: h.runId, workerId: h.worker(rank2).workerId! });
    expect(h.state.rendezvous.round).toBe(round + 1);
    h.apply({ kind: 'verification_result', check: h.state.checks![0].id, result: recomputed(2, 3) });
    expect(h.state.status).toBe('done');
    // The evaluations of step 2 arrive after `done` (rank 0 evaluates 1,000 images while the check ran).
    for (const name of [rank0, rank1]) {
      h.send(name, evaluationReport(h, name, { round, step: 2 }));
      expect(h.lastReceived(name)?.type, name).not.toBe('error');
    }
    expect(h.logs.filter((l) => l.event === 'evaluation').map((l) => l.data.verified)).toEqual([false, true]);
  });

  it('a liar caught after the last step: rolled back, and the job runs again instead of being done on step 0', () => {
    const h = swarm(short, 'end-liar');
    step(h, (own, params) => ({ own: own.map((o, r) => (r === 2 ? o.map((x) => -x) : o)), params }));
    step(h, (own, params) => ({ own: own.map((o, r) => (r === 2 ? o.map((x) => -x) : o)), params }));
    expect(h.state.lastCommit.step).toBe(2);
    const [c1] = h.state.checks!;
    h.apply({ kind: 'verification_result', check: c1.id, result: recomputed(1, 3) });
    expect(h.logs.some((l) => l.event === 'cheater_banned')).toBe(true);
    expect(h.state.lastCommit.step).toBe(0);
    expect(h.state.status).toBe('active');
    expect(h.received('a', 'done')).toEqual([]);
  });
});

describe('adaptive trust: the rates, and a caught liar’s place', () => {
  it('a newcomer is checked at the newcomer rate until it passed its checks, then at the job’s', () => {
    const job = { ...JOB, verify: { probability: 0.05, newcomer: { probability: 0.5, checks: 2 } } };
    const h = swarm(job, 'rates');
    const id = h.worker('a').workerId!;
    expect(checkRate(h.state, id)).toBe(0.5);
    for (let k = 0; k < 2; k++) {
      while ((h.state.checks ?? []).length === 0) step(h);
      const c = h.state.checks![0];
      h.apply({ kind: 'verification_result', check: c.id, result: recomputed(c.step, 3) });
    }
    expect(checkRate(h.state, id)).toBe(0.05);
  });

  it('a fresh id from a caught liar’s address waits out a doubling cool-off, then is checked at every commit', () => {
    const addrs = { a: '10.0.0.1', b: '10.0.0.2', c: '10.6.6.6' };
    const job = { ...JOB, verify: { probability: 0, newcomer: { probability: 1, checks: 10 } } };
    const h = swarm(job, 'place', addrs);
    step(h, (own, params) => ({ own: own.map((o, r) => (r === 2 ? o.map((x) => 2 * x) : o)), params }));
    const c = h.state.checks![0];
    h.apply({ kind: 'verification_result', check: c.id, result: recomputed(1, 3) });
    expect(h.isConnected('c')).toBe(false);
    // The same script comes back at once as a new worker from the same address: refused for 30 s.
    h.connect('c2', '10.6.6.6');
    const refused = h.send('c2', {
      type: 'hello',
      runId: null,
      workerId: null,
      peerId: 'peer-c2',
      adapter: { vendor: 'x', architecture: 'y', description: 'z' },
      haveStep: null,
      haveHash: null,
    });
    expect(refused.some((a) => a.kind === 'send' && a.msg.type === 'error' && a.msg.code === 'banned')).toBe(true);
    expect(h.state.penalties['a:10.6.6.6'].refuseJoinsUntil).toBe(h.now + 30_000);
    // After the cool-off it joins, and every commit it is in is checked (rate 1, whatever the job says).
    h.now += 30_001;
    const back = h.join('c3', { addr: '10.6.6.6' });
    expect(checkRate(h.state, back.workerId!)).toBe(SUSPECT_PROBABILITY);
    // Honest workers at other addresses keep the newcomer rate.
    expect(checkRate(h.state, h.worker('a').workerId!)).toBe(1);
    // It lies again in the next round it is in, the commit is checked, and the cool-off doubles.
    h.readyAll();
    while (!h.members().includes('c3')) {
      step(h);
      for (const k of h.state.checks ?? [])
        h.apply({ kind: 'verification_result', check: k.id, result: recomputed(k.step, 3) });
      h.readyAll();
    }
    const liarRank = h.members().indexOf('c3');
    step(h, (own, params) => ({ own: own.map((o, r) => (r === liarRank ? o.map((x) => 2 * x) : o)), params }));
    const again = h.state.checks!.at(-1)!;
    h.apply({ kind: 'verification_result', check: again.id, result: recomputed(again.step, 3) });
    expect(h.isConnected('c3')).toBe(false);
    expect(h.state.penalties['a:10.6.6.6'].refuseJoinsUntil).toBe(h.now + 60_000);
  });
});

describe('detection probability of recomputed checks (measured on the machine, 100 secrets)', () => {
  it('a liar from step 5 is caught within n commits at least as often as 1 − (1 − p)^(n − lag) says', () => {
    const p = 0.25;
    /** Commits between a check's draw and the verifier's answer (upload and recomputation). */
    const lag = 2;
    const firstLie = 5;
    const delays: number[] = [];
    for (let i = 0; i < 100; i++) {
      const h = swarm({ ...at(p), epochs: 20 }, `detection-${i}`);
      const due = new Map<number, number>();
      while (!h.logs.some((l) => l.event === 'cheater_banned') && h.state.lastCommit.step < 80) {
        const next = h.state.lastCommit.step + 1;
        const liarRank = h.members().indexOf('b');
        step(h, (own, params) => ({
          own: own.map((o, r) => (r === liarRank && next >= firstLie ? o.map((x) => x * 1000) : o)),
          params,
        }));
        for (const c of h.state.checks ?? []) if (!due.has(c.id)) due.set(c.id, h.state.lastCommit.step + lag);
        for (const c of [...(h.state.checks ?? [])]) {
          if (h.state.lastCommit.step < due.get(c.id)! || !h.state.checks?.some((x) => x.id === c.id)) continue;
          h.apply({ kind: 'verification_upload', check: c.id, ok: true });
          h.apply({ kind: 'verification_result', check: c.id, result: recomputed(c.step, 3) });
        }
      }
      const ban = h.logs.find((l) => l.event === 'cheater_banned');
      expect(ban?.data.workers).toEqual([h.worker('b').workerId]);
      delays.push((ban!.data.lastCommit as number) - firstLie);
    }
    const within = (n: number) => delays.filter((d) => d <= n).length / delays.length;
    const rows = [4, 8, 12, 20].map((n) => ({ n, measured: within(n), bound: 1 - (1 - p) ** Math.max(0, n - lag) }));
    console.log(
      `detection at p = ${p} (lag ${lag}): ${rows.map((r) => `≤${r.n} commits ${(r.measured * 100).toFixed(0)} % (bound ${(r.bound * 100).toFixed(0)} %)`).join(', ')}; worst ${Math.max(...delays)} commits`,
    );
    // 100 runs: the binomial spread is about ±5 points; the bound must hold within it.
    for (const r of rows) expect(r.measured).toBeGreaterThanOrEqual(r.bound - 0.1);
    expect(Math.max(...delays)).toBeLessThanOrEqual(40);
  }, 60_000);
});
