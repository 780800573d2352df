/**
 * Synthetic sketches for driving the machine's checks (verification.ts, checks.ts) through the
 * harness: honest rank contributions, the hop sketches an honest (or a lying) reduce-scatter produces,
 * and what the verifier would answer. The machine only adds and compares sketches; the arithmetic on
 * real gradients is tested in test/unit/core/sketch.test.ts and the verifier's kernels test.
 */
import type { StepSketches } from '../../../../core/state/sketch';
import { bucketsPerSegment, PARAMS_SKETCH_BUCKETS } from '../../../../core/state/sketch';
import type { RecomputedStep } from '../../../../coordinator/machine/state';
import { checkDraw } from '../../../../coordinator/machine/checks';
import { ringSketches } from '../../../support/ring-sketches';
import { mulberry32 } from '../../../support/rng';
import type { Harness } from './coordinator-harness';

/** Rank r's honest own-gradient sketch at `step` (deterministic), in a world of `size`. */
export function honestOwn(step: number, rank: number, size: number): number[] {
  const rand = mulberry32(1000 * step + rank);
  return Array.from({ length: size * bucketsPerSegment(size) }, () => rand() * 2 - 1);
}

export function honestParams(step: number, buckets = PARAMS_SKETCH_BUCKETS): number[] {
  const rand = mulberry32(77 * step + 5);
  return Array.from({ length: buckets }, () => rand() * 10);
}

export const massOf = (v: number[]) => v.map((x) => Math.abs(x) + 1);

/**
 * The sketches every rank reports at `step` when each adds `own[r]` in an honest reduce-scatter (the
 * ring of ring-allreduce.ts: segment j starts at rank j and ends with its owner j − 1), unless `added`
 * says what a rank really added on a hop instead (a liar): `added(r, j, honest)` → the block it sent on.
 */
export function sketches(
  own: number[][],
  params: number[],
  added: (r: number, j: number, block: number[]) => number[] = (_r, _j, block) => block,
): StepSketches[] {
  return ringSketches(own, massOf, added).map((s) => ({ ...s, params }));
}

/** Every member reports its next step with sketches; `tamper` may change the owns or params (a lie). */
export function verifiedStep(
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

/** What the verifier would recompute for an every-step check of `step`: the honest sketches, with masses. */
export function recomputed(step: number, size: number): RecomputedStep {
  const own = Array.from({ length: size }, (_, r) => honestOwn(step, r, size));
  const params = honestParams(step);
  return {
    own: own.map((values) => ({ values, mass: massOf(values) })),
    params: { values: params, mass: massOf(params) },
    startOk: true,
  };
}

/** The first step ≥ 1 that `salt` checks at rate `p` in every-step mode when one draw is made per commit from 0. */
export function selectedStep(salt: string, p: number): number {
  for (let step = 1; step < 10_000; step++) if (checkDraw(salt, step - 1, step) < p) return step;
  throw new Error('no step selected');
}
