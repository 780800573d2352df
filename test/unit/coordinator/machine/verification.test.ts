/**
 * Checked contributions in the coordinator core (core/verification.ts): sketches at every report, the
 * ring identity at every commit, recomputed spot checks, bans and the rollback. The machine runs in
 * the product's executor (coordinator-harness.ts) with its invariants (exactly-once audit) checked
 * after every event; the sketches are synthetic vectors (the core only adds and compares them: the
 * arithmetic on real gradients is test/unit/core/sketch.test.ts and the verifier's kernels test).
 */
import { describe, expect, it } from 'vitest';
import { parseJobSpec, type JobSpecInput } from '../../../../core/training/job';
import type { StepSketches } from '../../../../core/state/sketch';
import { bucketsPerSegment, PARAMS_SKETCH_BUCKETS, RECOMPUTE_TOLERANCE } from '../../../../core/state/sketch';
import type { RecomputedStep } from '../../../../coordinator/machine/state';
import { epochOrder } from '../../../../core/training/sampler';
import { planOf } from '../../../../core/training/groups';
import { referenceSlice } from '../../../support/hole-free-layout';
import { checkedSlices, judge, verificationDraw } from '../../../../coordinator/machine/verification';
import { mulberry32 } from '../../../support/rng';
import { Harness } from './coordinator-harness';

const JOB: JobSpecInput = {
  model: 'tiny-mlp',
  globalBatch: 12,
  epochs: 3,
  minWorkers: 3,
  maxWorkers: 3,
  lastCallMs: 0,
  heartbeatMs: 60_000,
  checkpointEvery: 4,
  verify: { probability: 0 },
};

/** Rank r's honest own-gradient sketch at `step` (deterministic), in a world of `size`. */
function honestOwn(step: number, rank: number, size: number): number[] {
  const rand = mulberry32(1000 * step + rank);
  return Array.from({ length: size * bucketsPerSegment(size) }, () => rand() * 2 - 1);
}

function honestParams(step: number): number[] {
  const rand = mulberry32(77 * step + 5);
  return Array.from({ length: PARAMS_SKETCH_BUCKETS }, () => rand() * 10);
}

/**
 * The sketches every rank reports at `step` when each adds `own[r]` in an honest reduce-scatter (the
 * ring of ring-allreduce.ts: segment j starts at rank j and ends with its owner j − 1), unless `added`
 * says what a rank really added on a hop instead (a liar): `added(r, j, honest)` → the block it sent on.
 */
function sketches(
  own: number[][],
  params: number[],
  added: (r: number, j: number, block: number[]) => number[] = (_r, _j, block) => block,
): StepSketches[] {
  const size = own.length;
  const n = own[0].length;
  const per = n / size;
  const zeros = () => new Array<number>(n).fill(0);
  const sent = own.map(zeros);
  const received = own.map(zeros);
  const sum = zeros();
  for (let j = 0; j < size; j++) {
    let partial = new Array<number>(per).fill(0);
    for (let g = 0; g < size; g++) {
      const r = (j + g) % size;
      const honest = partial.map((x, k) => x + own[r][j * per + k]);
      if (g === size - 1) {
        for (const [k, x] of honest.entries()) sum[j * per + k] = x;
        break;
      }
      partial = added(r, j, honest);
      partial.forEach((x, k) => {
        sent[r][j * per + k] = x;
        received[(r + 1) % size][j * per + k] = x;
      });
    }
  }
  const mass = (v: number[]) => v.map((x) => Math.abs(x) + 1);
  return own.map((o, r) => ({
    own: o,
    sum,
    sumMass: mass(sum),
    sent: sent[r],
    sentMass: mass(sent[r]),
    received: received[r],
    receivedMass: mass(received[r]),
    params,
  }));
}

/** Every member reports its next step with sketches; `tamper` may change the owns or params (a lie). */
function verifiedStep(
  h: Harness,
  tamper: (own: number[][], params: number[]) => { own: number[][]; params: number[] } = (own, params) => ({
    own,
    params,
  }),
): void {
  const names = h.members();
  const step = h.worker(names[0]).live + 1;
  const size = names.length;
  const honest = names.map((_, r) => honestOwn(step, r, size));
  const claimed = tamper(honest, honestParams(step));
  const all = sketches(claimed.own, claimed.params);
  names.forEach((name, r) => {
    if (h.state.rendezvous.phase === 'training') h.report(name, { sketch: all[r] });
  });
}

/** What the verifier would recompute for the step under check: the honest sketches, with masses. */
function recomputed(step: number, size: number): RecomputedStep {
  const mass = (v: number[]) => v.map((x) => Math.abs(x) + 1);
  const own = Array.from({ length: size }, (_, r) => honestOwn(step, r, size));
  const params = honestParams(step);
  return { own: own.map((values) => ({ values, mass: mass(values) })), params: { values: params, mass: mass(params) } };
}

function swarm(job: JobSpecInput = {}, salt = 'salt-of-this-test'): Harness {
  const h = new Harness({ ...JOB, ...job }, 96, 'run-1', undefined, { verifySalt: salt });
  for (const n of ['a', 'b', 'c']) h.join(n);
  h.readyAll();
  return h;
}

/** The first step ≥ 2 that `salt` selects at probability p (what the machine draws). */
function selectedStep(salt: string, p: number): number {
  for (let step = 2; step < 10_000; step++) if (verificationDraw(salt, step) < p) return step;
  throw new Error('no step selected');
}

describe('the job field', () => {
  it('needs every-step sync, a none/fp16 wire and commits every step; defaults p to 0.05', () => {
    expect(parseJobSpec({ verify: {} }).verify).toEqual({ probability: 0.05 });
    expect(() => parseJobSpec({ verify: {}, sync: { mode: 'local', innerSteps: 4 } })).toThrow(/verify needs/);
    expect(() => parseJobSpec({ verify: {}, sync: { mode: 'every-step', compression: 'int8' } })).toThrow(
      /verify needs/,
    );
    expect(() => parseJobSpec({ verify: {}, commitEvery: 2 })).toThrow(/verify needs/);
    expect(() => parseJobSpec({ verify: { probability: 1.5 } })).toThrow();
    expect(parseJobSpec({ verify: {}, sync: { mode: 'every-step', compression: 'fp16' } }).verify).toBeDefined();
  });
});

describe('sketches at every report (core/verification.ts)', () => {
  it('honest sketches commit step after step; the ring identity holds', () => {
    const h = swarm();
    for (let i = 0; i < 5; i++) verifiedStep(h);
    expect(h.state.lastCommit.step).toBe(5);
    expect(h.logs.some((l) => l.event === 'ring_identity_failed')).toBe(false);
  });

  it('a report without its sketch, or with the wrong number of buckets, is refused and changes nothing', () => {
    const h = swarm();
    verifiedStep(h);
    const before = JSON.stringify(h.state.pending);
    const missing = h.report('a');
    expect(missing.some((a) => a.kind === 'send' && a.msg.type === 'error' && a.msg.code === 'bad_sketch')).toBe(true);
    const good = sketches(
      [0, 1, 2].map((r) => honestOwn(2, r, 3)),
      honestParams(2),
    )[0];
    const short = h.report('a', { sketch: { ...good, own: good.own.slice(1) } });
    expect(short.some((a) => a.kind === 'send' && a.msg.type === 'error' && a.msg.code === 'bad_sketch')).toBe(true);
    expect(JSON.stringify(h.state.pending)).toBe(before);
  });

  it('a rank whose sketch of the reduced sums differs from the others’ is a divergence (nothing commits)', () => {
    const h = swarm();
    verifiedStep(h);
    const all = sketches(
      [0, 1, 2].map((r) => honestOwn(2, r, 3)),
      honestParams(2),
    );
    h.report('a', { sketch: all[0] });
    h.report('b', { sketch: { ...all[1], sum: all[1].sum.map((x) => x * 2) } });
    expect(h.state.lastCommit.step).toBe(1);
    expect(h.logs.some((l) => l.event === 'divergence')).toBe(true);
  });

  it('a job that does not verify refuses sketches (a tab must not send what nobody checks)', () => {
    const h = new Harness({ ...JOB, verify: undefined }, 96);
    for (const n of ['a', 'b', 'c']) h.join(n);
    h.readyAll();
    const all = sketches(
      [0, 1, 2].map((r) => honestOwn(1, r, 3)),
      honestParams(1),
    );
    const actions = h.report('a', { sketch: all[0] });
    expect(actions.some((a) => a.kind === 'send' && a.msg.type === 'error' && a.msg.code === 'bad_sketch')).toBe(true);
  });
});

describe('every hop of the ring, at every commit', () => {
  /** All members report the next step; `added` is what each rank really sent on (see `sketches`). */
  function ringStep(h: Harness, added: Parameters<typeof sketches>[2], tamper?: (claims: StepSketches[]) => void) {
    const names = h.members();
    const step = h.state.lastCommit.step + 1;
    const all = sketches(
      names.map((_, r) => honestOwn(step, r, names.length)),
      honestParams(step),
      added,
    );
    tamper?.(all);
    for (const [r, name] of names.entries())
      if (h.state.rendezvous.phase === 'training') h.report(name, { sketch: all[r] });
    // The last report may close the round inside its own send: the harness marks it computed after that.
    for (const w of h.workers.values()) w.live = w.committed.step;
    if (h.state.rendezvous.phase !== 'training' && h.state.status === 'active') h.readyAll();
    return names;
  }

  it('a rank that sends more than it received plus its own, and says so, contradicts itself: banned alone', () => {
    const h = swarm();
    for (let i = 0; i < 3; i++) verifiedStep(h);
    const names = ringStep(h, (r, _j, block) => (r === 1 ? block.map((x) => x * 1000) : block));
    expect(h.state.lastCommit.step).toBe(0); // not committed, and b's earlier contributions rolled back
    const failed = h.logs.find((l) => l.event === 'ring_identity_failed')!;
    expect(failed.data.liars).toEqual([h.worker(names[1]).workerId]);
    expect(h.logs.find((l) => l.event === 'cheater_banned')?.data.workers).toEqual([h.worker(names[1]).workerId]);
    expect(h.isConnected(names[1])).toBe(false);
    expect(h.isConnected(names[0]) && h.isConnected(names[2])).toBe(true);
    expect(h.state.status).toBe('active');
  });

  it('a rank that hides what it sent disputes one neighbour; the swap in the ring narrows it to the liar', () => {
    const h = swarm();
    verifiedStep(h);
    const liar = h.worker('b').workerId!;
    for (let attempt = 0; attempt < 4 && !h.logs.some((l) => l.event === 'cheater_banned'); attempt++) {
      const liarRank = h.members().indexOf('b');
      const honestSent: number[][] = [];
      ringStep(
        h,
        (r, j, block) => {
          if (r !== liarRank) return block;
          honestSent[j] = block;
          return block.map((x) => x * 3 + 1);
        },
        (claims) => {
          // It claims it sent the honest sums: its own books balance, its receiver's do not match.
          const per = bucketsPerSegment(claims.length);
          honestSent.forEach((block, j) => {
            if (!block) return;
            block.forEach((x, k) => {
              claims[liarRank].sent[j * per + k] = x;
              claims[liarRank].sentMass[j * per + k] = Math.abs(x) + 1;
            });
          });
        },
      );
    }
    const disputes = h.logs.filter((l) => l.event === 'ring_identity_failed').map((l) => l.data.disputes);
    expect(disputes.length).toBe(2);
    expect(h.logs.find((l) => l.event === 'cheater_banned')?.data.workers).toEqual([liar]);
    expect(h.isConnected('a') && h.isConnected('c')).toBe(true);
  });

  it('a neighbour reported for sending NaN: the two are suspects, the next report narrows it to the sender', () => {
    const h = swarm();
    verifiedStep(h);
    const attacker = h.worker('c').workerId!;
    for (let attempt = 0; attempt < 4 && h.isConnected('c'); attempt++) {
      const names = h.members();
      const r = names.indexOf('c');
      const receiver = names[(r + 1) % names.length];
      h.send(receiver, {
        type: 'failure',
        runId: h.runId,
        workerId: h.worker(receiver).workerId!,
        round: h.state.rendezvous.round,
        reason: 'protocol: NaN at [12] after this chunk',
        peer: attacker,
        evidence: 'bad_data',
      });
      if (h.state.rendezvous.phase !== 'training' && h.state.status === 'active') h.readyAll();
    }
    expect(h.logs.filter((l) => l.event === 'data_dispute').length).toBe(2);
    expect(h.logs.find((l) => l.event === 'cheater_banned')?.data.workers).toEqual([attacker]);
    expect(h.isConnected('a') && h.isConnected('b')).toBe(true);
    expect(h.state.status).toBe('active');
  });
});

describe('recomputed spot checks', () => {
  const salt = 'spot-check-salt';

  it('draws about p of the steps, from the secret (another secret, other steps)', () => {
    const picked = (s: string) => Array.from({ length: 20_000 }, (_, i) => verificationDraw(s, i + 2) < 0.05);
    const a = picked(salt);
    const rate = a.filter(Boolean).length / a.length;
    expect(rate).toBeGreaterThan(0.045);
    expect(rate).toBeLessThan(0.055);
    const b = picked('another');
    const both = a.filter((x, i) => x && b[i]).length / a.length;
    expect(both).toBeLessThan(0.005); // independent: ≈ 0.05² = 0.0025
  });

  it('asks one member for the state before the chosen step with its committed; an honest step passes', () => {
    const p = 0.3;
    const h = swarm({ verify: { probability: p } }, salt);
    const target = selectedStep(salt, p);
    for (let s = 1; s < target; s++) verifiedStep(h);
    verifiedStep(h);
    const v = h.state.verification!;
    expect(v.step).toBe(target);
    const uploader = [...h.workers.values()].find((w) => w.workerId === v.uploader)!;
    const committed = uploader.inbox.filter((m) => m.type === 'committed').at(-1)!;
    expect(committed.type === 'committed' && committed.upload?.step).toBe(target - 1);
    const others = [...h.workers.values()].filter((w) => w.workerId !== v.uploader);
    for (const w of others)
      expect(w.inbox.filter((m) => m.type === 'committed').some((m) => m.type === 'committed' && m.upload)).toBe(false);
    h.apply({ kind: 'verification_upload', step: target - 1, ok: true });
    expect(h.state.verification?.phase).toBe('recompute');
    h.apply({ kind: 'verification_result', step: target, result: recomputed(target, 3) });
    expect(h.state.verification).toBeNull();
    const done = h.logs.find((l) => l.event === 'verification_done')!;
    expect(done.data.cheaters).toEqual([]);
    expect(h.logs.some((l) => l.event === 'cheater_banned')).toBe(false);
  });

  it('the slices it recomputes are the sampler’s, by rank (the tabs trained exactly these)', () => {
    const h = swarm();
    const world = h.state.rendezvous.participants;
    const { slices } = checkedSlices(h.state, { world, step: 1, at: { epoch: 0, cursor: 0, holes: [] } });
    const order = epochOrder(h.state.job.seed, 0, h.state.datasetSize);
    const shares = world.map((w) => w.share);
    for (const w of world) {
      const slice = referenceSlice(1, planOf(h.state), shares, w.rank);
      expect(Array.from(slices[w.rank])).toEqual(Array.from(order.subarray(slice.start, slice.start + slice.count)));
    }
    expect(new Set(slices.flatMap((s) => [...s])).size).toBe(12);
  });

  it('a consistent liar (scaled own gradient, sums that add up) is caught: banned, rolled back to the checkpoint before it joined', () => {
    const p = 0.25;
    // A secret whose first chosen step comes after the checkpoint of step 4.
    const late = Array.from({ length: 100 }, (_, i) => `late-${i}`).find((s) => selectedStep(s, p) > 5)!;
    const h = new Harness({ ...JOB, verify: { probability: p } }, 96, 'run-1', undefined, { verifySalt: late });
    for (const n of ['a', 'b', 'c']) h.join(n);
    h.readyAll();
    // A checkpoint of step 4 is stored, then the liar joins (world of 3 from here on in a new round).
    while (h.state.lastCommit.step < 4) verifiedStep(h);
    h.apply({ kind: 'checkpoint_stored', step: 4, epoch: 0, cursor: 48, sha256: 'a'.repeat(64) });
    const target = selectedStep(late, p);
    const liarName = 'b';
    // Everyone honest until the target; then b reports its own sketch of a gradient ×1000 (the sums agree).
    while (h.state.lastCommit.step < target - 1) verifiedStep(h);
    const liarRank = h.members().indexOf(liarName);
    verifiedStep(h, (own, params) => ({
      own: own.map((o, r) => (r === liarRank ? o.map((x) => x * 1000) : o)),
      params,
    }));
    expect(h.state.lastCommit.step).toBe(target); // the identity holds: only a recomputation tells
    h.apply({ kind: 'verification_upload', step: target - 1, ok: true });
    h.apply({ kind: 'verification_result', step: target, result: recomputed(target, 3) });
    const banned = h.logs.find((l) => l.event === 'cheater_banned')!;
    expect(banned.data.workers).toEqual([h.worker(liarName).workerId]);
    expect(h.isConnected(liarName)).toBe(false);
    // b contributed from step 1: nothing it touched is kept, and no stored checkpoint after it joined is.
    expect(h.state.lastCommit.step).toBe(0);
    expect(h.state.checkpoints).toEqual([]);
    expect(h.commits.every((c) => c.step <= 0)).toBe(true);
    expect(h.state.status).toBe('active');
  });

  it('two colluders lying together are both banned; a wrong update with honest gradients bans the round', () => {
    const r: RecomputedStep = recomputed(7, 3);
    const world = ['a', 'b', 'c'].map((workerId, rank) => ({ workerId, rank, share: 1 }));
    const honest = { own: r.own.map((o) => o.values), params: r.params.values };
    expect(judge({ world, claims: honest }, r).cheaters).toEqual([]);
    const two = { ...honest, own: honest.own.map((o, i) => (i === 0 ? o : o.map((x) => -x))) };
    expect(judge({ world, claims: two }, r).cheaters).toEqual(['b', 'c']);
    const wrongUpdate = { ...honest, params: honest.params.map((x) => x + 1) };
    expect(judge({ world, claims: wrongUpdate }, r).cheaters).toEqual(['a', 'b', 'c']);
    // Within the tolerance (a different GPU's rounding) is no lie.
    const rounding = { ...honest, own: honest.own.map((o) => o.map((x) => x * (1 + RECOMPUTE_TOLERANCE / 10))) };
    expect(judge({ world, claims: rounding }, r).cheaters).toEqual([]);
  });

  it('an upload that is not the committed state bans the uploader; no upload in time costs a strike', () => {
    const p = 0.3;
    const h = swarm({ verify: { probability: p } }, salt);
    const target = selectedStep(salt, p);
    while (h.state.lastCommit.step < target) verifiedStep(h);
    const uploader = h.state.verification!.uploader;
    h.apply({ kind: 'verification_upload', step: target - 1, ok: false, reason: 'hash mismatch' });
    expect(h.logs.find((l) => l.event === 'cheater_banned')?.data.workers).toEqual([uploader]);
    expect(h.state.verification).toBeNull();
  });

  it('no upload by the deadline: the check is dropped and the uploader charged, nothing else changes', () => {
    const p = 0.3;
    const h = swarm({ verify: { probability: p } }, salt);
    const target = selectedStep(salt, p);
    while (h.state.lastCommit.step < target) verifiedStep(h);
    const step = h.state.lastCommit.step;
    h.advance(61_000);
    expect(h.state.verification).toBeNull();
    expect(h.logs.some((l) => l.event === 'verification_abandoned')).toBe(true);
    expect(h.logs.some((l) => l.event === 'charged' && l.data.why === 'no verification upload')).toBe(true);
    expect(h.state.lastCommit.step).toBe(step);
  });
});

describe('detection probability of recomputed checks (measured on the machine, 100 secrets)', () => {
  it('a liar from step 5 is caught within n steps at least as often as 1 − (1 − p)^(n − lag) says', () => {
    const p = 0.25;
    /** Commits between a step's selection and the verifier's answer (upload and recomputation). */
    const lag = 2;
    const firstLie = 5;
    const delays: number[] = [];
    for (let i = 0; i < 100; i++) {
      const h = new Harness({ ...JOB, epochs: 20, verify: { probability: p } }, 96, 'run-1', undefined, {
        verifySalt: `detection-${i}`,
      });
      for (const n of ['a', 'b', 'c']) h.join(n);
      h.readyAll();
      let dueAt: number | null = null;
      while (!h.logs.some((l) => l.event === 'cheater_banned') && h.state.lastCommit.step < 80) {
        const step = h.state.lastCommit.step + 1;
        const liarRank = h.members().indexOf('b');
        verifiedStep(h, (own, params) => ({
          own: own.map((o, r) => (r === liarRank && step >= firstLie ? o.map((x) => x * 1000) : o)),
          params,
        }));
        const v = h.state.verification;
        if (v && dueAt === null) dueAt = h.state.lastCommit.step + lag;
        if (v && dueAt !== null && h.state.lastCommit.step >= dueAt) {
          h.apply({ kind: 'verification_upload', step: v.step - 1, ok: true });
          h.apply({ kind: 'verification_result', step: v.step, result: recomputed(v.step, 3) });
          dueAt = null;
        }
      }
      const ban = h.logs.find((l) => l.event === 'cheater_banned');
      expect(ban?.data.workers).toEqual([h.worker('b').workerId]);
      delays.push((ban!.data.lastCommit as number) - firstLie);
    }
    const within = (n: number) => delays.filter((d) => d <= n).length / delays.length;
    const rows = [4, 8, 12, 20].map((n) => ({ n, measured: within(n), bound: 1 - (1 - p) ** Math.max(0, n - lag) }));
    console.log(
      `detection at p = ${p} (lag ${lag}): ${rows.map((r) => `≤${r.n} steps ${(r.measured * 100).toFixed(0)} % (bound ${(r.bound * 100).toFixed(0)} %)`).join(', ')}; worst ${Math.max(...delays)} steps`,
    );
    // 100 runs: the binomial spread is about ±5 points; the bound must hold within it.
    for (const r of rows) expect(r.measured).toBeGreaterThanOrEqual(r.bound - 0.1);
    expect(Math.max(...delays)).toBeLessThanOrEqual(40);
  });
});
