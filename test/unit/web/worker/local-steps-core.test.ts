/**
 * Local sync mode in the pure parts: the job field, the commit rule (only the outer step's hash is
 * agreed), the snapshot's outer-momentum section and the committed-state hash, and the outer step's
 * arithmetic against a float64 reference.
 */
import { describe, expect, it } from 'vitest';
import { hashParams, stateHash, trainingStateHash } from '../../../../core/state/hash';
import { jobPublic, parseJobSpec, type JobSpecInput } from '../../../../core/training/job';
import { resolveModelSpec, parameterLayout } from '../../../../core/training/model-spec';
import { NO_HASH } from '../../../../core/protocol/tab-messages';
import { isCheckpointCommit } from '../../../../core/training/commit-schedule';
import { walkGroups } from '../../../support/group-walk';
import { decodeSnapshot, encodeSnapshot } from '../../../../core/state/snapshot';
import { outerWeight } from '../../../../core/training/outer-weights';
import { nesterovStep, OuterState, pseudoGradient } from '../../../../web/worker/outer-step';
import { Harness, hashOf } from '../../coordinator/machine/coordinator-harness';
import { mulberry32 } from '../../../support/rng';

const LOCAL: JobSpecInput = {
  model: 'tiny-mlp',
  globalBatch: 8,
  epochs: 1,
  minWorkers: 2,
  maxWorkers: 2,
  lastCallMs: 0,
  heartbeatMs: 60_000,
  sync: { mode: 'local', innerSteps: 3, compression: 'int8' },
};

describe('the sync field of a job', () => {
  it('defaults to every-step fp32 and fills the DiLoCo outer optimizer in local mode', () => {
    expect(parseJobSpec({}).sync).toEqual({ mode: 'every-step', compression: 'none' });
    const local = parseJobSpec(LOCAL);
    expect(local.sync).toEqual({
      mode: 'local',
      innerSteps: 3,
      outer: { kind: 'nesterov', lr: 0.7, momentum: 0.9 },
      compression: 'int8',
      // Overlapped outer steps are asked for, not the default (docs/local-steps.md).
      overlap: false,
    });
    // The outer step is the commit point.
    expect(local.commitEvery).toBe(3);
    const pub = jobPublic(local, 64);
    expect(pub.sync).toEqual(local.sync);
    expect(walkGroups(pub).map((g) => g.group.lastStep)).toEqual([3, 6, 8]);
  });

  it('refuses a commitEvery that is not the outer step, and bad sync fields, in one line', () => {
    expect(() => parseJobSpec({ ...LOCAL, commitEvery: 2 })).toThrow(/commitEvery: in local sync mode/);
    expect(parseJobSpec({ ...LOCAL, commitEvery: 3 }).commitEvery).toBe(3);
    expect(() => parseJobSpec({ sync: { mode: 'local', innerSteps: 0 } })).toThrow(/sync.innerSteps/);
    expect(() => parseJobSpec({ sync: { mode: 'local', innerSteps: 4, compression: 'int4' } })).toThrow(
      /sync.compression/,
    );
    expect(() =>
      parseJobSpec({ sync: { mode: 'local', innerSteps: 4, outer: { kind: 'nesterov', momentum: 1 } } }),
    ).toThrow(/sync.outer.momentum/);
    expect(() => parseJobSpec({ sync: { mode: 'sometimes' } })).toThrow(/sync/);
  });
});

describe('checkpoint points with outer steps', () => {
  it('are the first commit point at or after each multiple of checkpointEvery, and epoch and job ends', () => {
    const plan = { datasetSize: 200, globalBatch: 16, epochs: 2, commitEvery: 4 };
    const groups = walkGroups(plan);
    expect(groups.map((g) => g.group.lastStep)).toEqual([4, 8, 12, 13, 17, 21, 25, 26]);
    const checkpoints = (every: number, of = groups) =>
      of.filter((g) => isCheckpointCommit(g.span, every)).map((g) => g.group.lastStep);
    expect(checkpoints(10)).toEqual([12, 13, 21, 26]);
    // Committing every step, they are exactly the multiples (and the ends): the rule of every-step jobs.
    expect(checkpoints(5, walkGroups({ ...plan, commitEvery: 1 }))).toEqual([5, 10, 13, 15, 20, 25, 26]);
  });
});

describe('the commit rule in local sync mode', () => {
  function twoRanks(): Harness {
    const h = new Harness(LOCAL, 64);
    h.join('a');
    h.join('b');
    h.readyAll();
    expect(h.state.rendezvous.phase).toBe('training');
    return h;
  }

  it('accepts inner steps whose hashes differ (or are NO_HASH) and commits the outer step when all agree', () => {
    const h = twoRanks();
    h.report('a', { hash: NO_HASH });
    h.report('b', { hash: hashOf(99) });
    h.report('a', { hash: hashOf(7) });
    h.report('b', { hash: NO_HASH });
    expect(h.state.lastCommit.step).toBe(0);
    expect(h.logs.filter((l) => l.event === 'divergence')).toEqual([]);
    h.report('a', { hash: hashOf(3) });
    h.report('b', { hash: hashOf(3) });
    expect(h.state.lastCommit.step).toBe(3);
    expect(h.commits.map((c) => [c.firstStep, c.step, c.count])).toEqual([[1, 3, 24]]);
    expect(h.state.record.cursor).toBe(24);
  });

  it('closes the round as divergence when the ranks disagree on the outer step', () => {
    const h = twoRanks();
    for (let i = 0; i < 2; i++) {
      h.report('a', { hash: NO_HASH });
      h.report('b', { hash: NO_HASH });
    }
    const restarts = h.state.restarts;
    h.report('a', { hash: hashOf(3) });
    h.report('b', { hash: hashOf(4) });
    expect(h.state.lastCommit.step).toBe(0);
    expect(h.logs.some((l) => l.event === 'divergence')).toBe(true);
    expect(h.state.restarts).toBe(restarts + 1);
    // The record is untouched: the outer step's 24 samples go back to the remaining set.
    expect(h.state.record.cursor).toBe(0);
  });
});

describe('the outer step', () => {
  const rng = mulberry32(11);
  const rand = (n: number) => Float32Array.from({ length: n }, () => (rng() - 0.5) * 2);

  it('pseudoGradient and nesterovStep match a float64 reference to float32 rounding', () => {
    const n = 1000;
    const committed = rand(n);
    const ranks = [rand(n), rand(n), rand(n)];
    const samples = [40, 24, 0];
    const total = samples.reduce((a, b) => a + b, 0);
    const parts = ranks.map((local, r) => pseudoGradient(committed, local, outerWeight(samples[r], total)));
    const sum = new Float32Array(n);
    for (const p of parts) for (let i = 0; i < n; i++) sum[i] += p[i];
    const momentum = rand(n).map((x) => x * 0.1);
    const opt = { lr: 0.7, momentum: 0.9 };
    const { params, momentum: u } = nesterovStep(committed, momentum, sum, opt);
    for (let i = 0; i < n; i++) {
      let d = 0;
      for (let r = 0; r < 3; r++) d += (committed[i] - ranks[r][i]) * (samples[r] / total);
      const uRef = 0.9 * momentum[i] + d;
      const pRef = committed[i] - 0.7 * (d + 0.9 * uRef);
      expect(Math.abs(u[i] - uRef)).toBeLessThan(1e-5);
      expect(Math.abs(params[i] - pRef)).toBeLessThan(1e-5);
    }
    // The third rank had no samples: its part is exactly zero.
    expect(parts[2].every((x) => x === 0)).toBe(true);
  });

  it('with one rank, no momentum and lr 1 the outer step lands on the local parameters', () => {
    const committed = rand(64);
    const local = rand(64);
    const outer = new OuterState({ lr: 1, momentum: 0 }, 64);
    const params = outer.step(outer.pseudoGradient(committed, local, 1));
    for (let i = 0; i < 64; i++) expect(Math.abs(params[i] - local[i])).toBeLessThan(1e-6);
  });

  it('refuses a non-finite pseudo-gradient and an outer step without its pseudo-gradient', () => {
    const outer = new OuterState({ lr: 0.7, momentum: 0.9 }, 4);
    expect(() => outer.step(new Float32Array(4))).toThrow(/without a pseudo-gradient/);
    outer.pseudoGradient(new Float32Array(4), new Float32Array(4), 1);
    expect(() => outer.step(Float32Array.of(0, Number.NaN, 0, 0))).toThrow(/not finite/);
    expect(() => pseudoGradient(new Float32Array(4), new Float32Array(4), 2)).toThrow(/weight/);
  });

  it('restoreBackup puts back the momentum of the last saveBackup', () => {
    const outer = new OuterState({ lr: 0.5, momentum: 0.5 }, 3);
    outer.saveBackup();
    outer.pseudoGradient(Float32Array.of(1, 1, 1), Float32Array.of(0, 0, 0), 1);
    outer.step(Float32Array.of(1, 2, 3));
    expect(Array.from(outer.momentum)).toEqual([1, 2, 3]);
    outer.restoreBackup();
    expect(Array.from(outer.momentum)).toEqual([0, 0, 0]);
  });
});

describe('the committed state of local mode in a snapshot', () => {
  const spec = resolveModelSpec('tiny-mlp');
  const n = parameterLayout(spec).totalElements;
  const params = Float32Array.from({ length: n }, (_, i) => Math.sin(i));
  const moments = [new Float32Array(n).fill(0.25), new Float32Array(n).fill(0.5)];
  const outer = Float32Array.from({ length: n }, (_, i) => i / n);

  it('carries the outer momentum, and its hash covers it', () => {
    const bytes = encodeSnapshot({
      spec,
      step: 6,
      epoch: 0,
      cursor: 48,
      optimizer: { kind: 'adamw', t: 6 },
      params,
      moments,
      outer,
    });
    const snap = decodeSnapshot(bytes);
    expect(Array.from(snap.outer!)).toEqual(Array.from(outer));
    expect(snap.header.optimizer.outer).toBe('nesterov');
    expect(snap.paramsHash).toBe(hashParams(params));
    expect(snap.stateHash).toBe(stateHash(params, outer));
    expect(snap.stateHash).not.toBe(snap.paramsHash);
    const changed = outer.slice();
    changed[5] += 1;
    expect(stateHash(params, changed)).not.toBe(snap.stateHash);
  });

  it('an every-step snapshot has no outer section and its state hash covers params, moments and t', () => {
    const snap = decodeSnapshot(
      encodeSnapshot({ spec, step: 1, epoch: 0, cursor: 8, optimizer: { kind: 'adamw', t: 1 }, params, moments }),
    );
    expect(snap.outer).toBeNull();
    expect(snap.stateHash).toBe(trainingStateHash(params, moments, 1));
    expect(snap.stateHash).not.toBe(snap.paramsHash);
  });

  it('refuses an outer momentum of the wrong length', () => {
    expect(() =>
      encodeSnapshot({
        spec,
        step: 1,
        epoch: 0,
        cursor: 8,
        optimizer: { kind: 'adamw', t: 1 },
        params,
        moments,
        outer: outer.subarray(1),
      }),
    ).toThrow(/outer momentum has/);
  });
});
