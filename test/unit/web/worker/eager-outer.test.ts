/**
 * The overlapped outer step's arithmetic (web/worker/eager-outer.ts) against references computed here:
 * the consensus-anchored eager update in float64 (each rank measures its progress against the midpoint
 * of the consensus and its start and starts its next inner phase from the committed consensus stepped
 * with that progress; the committed consensus is the Nesterov chain of the sums), plain DiLoCo bit for
 * bit with one rank, and the bookkeeping of carries and synchronous outer steps.
 */
import { describe, expect, it } from 'vitest';
import { EagerOuter } from '../../../../web/worker/eager-outer';
import { nesterovStep, OuterState } from '../../../../web/worker/outer-step';
import { mulberry32 } from '../../../support/rng';

const OPT = { lr: 0.7, momentum: 0.9 };
const rng = mulberry32(24);
const rand = (n: number, scale = 1) => Float32Array.from({ length: n }, () => (rng() - 0.5) * 2 * scale);

/** One Nesterov step in float64 (PyTorch's SGD with nesterov=True, no dampening). */
function nesterov64(theta: number[], u: number[], g: number[]): { theta: number[]; u: number[] } {
  const next = u.map((ui, i) => OPT.momentum * ui + g[i]);
  return { theta: theta.map((t, i) => t - OPT.lr * (g[i] + OPT.momentum * next[i])), u: next };
}

/** A rank as the worker drives it (web/worker/outer-calls.ts): its EagerOuter and its committed momentum. */
class Rank {
  readonly eager: EagerOuter;
  momentum: Float32Array;
  /** Where its current inner phase started (the last eager step's result). */
  start: Float32Array;

  constructor(start: Float32Array) {
    this.eager = new EagerOuter(OPT, start, new Float32Array(start.length));
    this.momentum = new Float32Array(start.length);
    this.start = start.slice();
  }

  /** The eager step after an inner phase that moved it by `progress`; its contribution. */
  step(progress: Float32Array, weight: number): Float32Array {
    const live = this.start.map((x, i) => x - progress[i]);
    const { params, contribution } = this.eager.eager(live, weight);
    this.start = params;
    return contribution;
  }

  consensus(sum: Float32Array): Float32Array {
    return this.eager.consensusStep(sum, this.momentum, false).params;
  }

  commit(): Float32Array {
    const { params, momentum } = this.eager.commit();
    this.momentum = momentum;
    return params;
  }
}

function sumOf(parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts[0].length);
  for (const p of parts) for (let i = 0; i < out.length; i++) out[i] += p[i];
  return out;
}

describe('the eager outer step', () => {
  it('follows the anchored eager update in float64, ranks agreeing on the consensus, their weighted mean start on it', () => {
    const n = 300;
    const weights = [0.5, 0.3, 0.2];
    const start = rand(n);
    const ranks = weights.map(() => new Rank(start));
    let consensus = { theta: Array.from(start), u: new Array<number>(n).fill(0) };
    for (let t = 0; t < 6; t++) {
      if (t > 0) for (const r of ranks) r.commit();
      const progress = weights.map(() => rand(n, 0.05));
      // The reference takes each rank's live state where its float32 inner phase really ended.
      const live = ranks.map((r, k) => Array.from(progress[k], (p, i) => Math.fround(r.start[i] - p)));
      const own = ranks.map((r, k) => live[k].map((l, i) => (consensus.theta[i] + r.start[i]) / 2 - l));
      const parts = ranks.map((r, k) => r.step(progress[k], weights[k]));
      const sum = sumOf(parts);
      const next = nesterov64(consensus.theta, consensus.u, Array.from(sum));
      weights.forEach((w, k) => {
        for (let i = 0; i < n; i++) expect(Math.abs(parts[k][i] - w * own[k][i])).toBeLessThan(2e-6);
        // Its next inner phase: the last committed consensus stepped with its own progress.
        const mine = nesterov64(consensus.theta, consensus.u, own[k]).theta;
        for (let i = 0; i < n; i++) expect(Math.abs(ranks[k].start[i] - mine[i])).toBeLessThan(2e-5);
      });
      const committed = ranks.map((r) => r.consensus(sum));
      // Every rank computes the same consensus from the same allreduced bytes: bit for bit.
      for (const c of committed.slice(1)) expect(c).toEqual(committed[0]);
      for (let i = 0; i < n; i++) expect(Math.abs(committed[0][i] - next.theta[i])).toBeLessThan(2e-5);
      // The weights' mean of where the ranks start next is the consensus they will commit (the step is linear).
      for (let i = 0; i < n; i++) {
        const mean = weights.reduce((a, w, k) => a + w * ranks[k].start[i], 0);
        expect(Math.abs(mean - committed[0][i])).toBeLessThan(2e-5);
      }
      consensus = next;
    }
  });

  it('with one rank is DiLoCo bit for bit: the own state and the consensus both follow the synchronous outer steps', () => {
    const n = 256;
    const start = rand(n);
    const rank = new Rank(start);
    const plain = new OuterState(OPT, n);
    let committed = start.slice();
    plain.saveBackup();
    for (let t = 0; t < 5; t++) {
      if (t > 0) expect(rank.commit()).toEqual(committed);
      const progress = rand(n, 0.05);
      const contribution = rank.step(progress, 1);
      // Plain DiLoCo from the same start with the same inner progress.
      const delta = plain.pseudoGradient(
        committed,
        committed.map((x, i) => x - progress[i]),
        1,
      );
      committed = new Float32Array(plain.step(delta));
      plain.saveBackup();
      expect(rank.start).toEqual(committed);
      rank.consensus(contribution);
    }
  });

  it('weighs the last contribution anew for a carried round; the eager step it took does not depend on the weight', () => {
    const n = 64;
    const start = rand(n);
    const rank = new Rank(start);
    const progress = rand(n, 0.1);
    rank.step(progress, 0.5);
    const startAfter = rank.start.slice();
    const again = rank.eager.reweigh(0.25);
    // The progress as the rank saw it: start − live, in float32 (its first start is the consensus).
    const seen = progress.map((p, i) => Math.fround(start[i] - Math.fround(start[i] - p)));
    expect(again).toEqual(seen.map((p) => p * 0.25));
    expect(rank.start).toEqual(startAfter);
    const sum = again.map((x) => x * 3);
    const committed = rank.consensus(sum);
    rank.commit();
    // The next eager step: progress against the midpoint of the consensus and its start, stepped from the consensus.
    const progress2 = rand(n, 0.1);
    const from = rank.start.slice();
    const contribution = rank.step(progress2, 0.25);
    const p2 = Float32Array.from(progress2, (p, i) => 0.5 * (committed[i] + from[i]) - Math.fround(from[i] - p));
    expect(contribution).toEqual(p2.map((p) => p * 0.25));
    const momentum = nesterovStep(start, new Float32Array(n), sum, OPT).momentum;
    expect(rank.start).toEqual(nesterovStep(committed, momentum, p2, OPT).params);
  });

  it('a synchronous outer step brings the rank back to the consensus on commit; undone, it gives the live parameters back', () => {
    const n = 64;
    const start = rand(n);
    const rank = new Rank(start);
    rank.step(rand(n, 0.1), 1);
    rank.consensus(rand(n, 0.1));
    const c = rank.commit();
    const live = rank.start.map((x) => x - 0.01);
    const contribution = rank.eager.syncContribution(live, 0.5);
    // Measured as an eager step's: against the midpoint of the consensus and the rank's start.
    expect(contribution).toEqual(
      Float32Array.from(live, (x, i) => Math.fround(0.5 * (c[i] + rank.start[i]) - x) * 0.5),
    );
    const pending = rank.eager.consensusStep(contribution, rank.momentum, true);
    expect(rank.eager.syncPending).toBe(true);
    // Undone (the world lost a member before the commit): the live parameters come back, nothing is pending.
    expect(rank.eager.revert()).toEqual(live);
    expect(() => rank.eager.commit()).toThrow(/no outer step to commit/);
    // Taken again and committed: the next inner phase starts at the consensus, with no stale terms.
    rank.eager.syncContribution(live, 0.5);
    const again = rank.eager.consensusStep(contribution, rank.momentum, true);
    expect(again.params).toEqual(pending.params);
    const { params } = rank.eager.commit();
    const next = rank.eager.eager(
      params.map((x) => x - 0.02),
      1,
    );
    const fresh = Float32Array.from(params, (x) => x - Math.fround(x - 0.02));
    expect(next.contribution).toEqual(fresh);
    expect(next.params).toEqual(nesterovStep(params, again.momentum, fresh, OPT).params);
  });

  it('refuses an eager step over an uncommitted one, a weight outside [0, 1], a wrong length and a non-finite sum', () => {
    const n = 16;
    const rank = new Rank(rand(n));
    expect(() => rank.eager.reweigh(0.5)).toThrow(/no outer step/);
    const contribution = rank.step(rand(n, 0.1), 1);
    rank.consensus(contribution);
    expect(() => rank.step(rand(n, 0.1), 1)).toThrow(/not committed/);
    rank.commit();
    expect(() => rank.step(rand(n, 0.1), 1.5)).toThrow(RangeError);
    expect(() => rank.eager.eager(new Float32Array(n + 1), 1)).toThrow(RangeError);
    const bad = new Float32Array(n);
    bad[3] = Number.NaN;
    expect(() => rank.consensus(bad)).toThrow(/not finite/);
  });
});
