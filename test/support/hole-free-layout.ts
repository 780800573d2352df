/**
 * The step layout of releases before the record held holes, as step-number formulas: step k of the
 * run reads `globalBatch` positions at ((k−1) mod stepsPerEpoch)·globalBatch of its epoch, and commit
 * points are every commitEvery-th step of each epoch, its last step and the job's last. Kept here as an
 * independent reference: the group plan (core/training/groups.ts) must reproduce it exactly whenever
 * there are no holes (every-step mode always; local mode until a partial commit).
 */
import { assignStep, mergeRanges, type PositionRange, type StepPlan } from '../../core/training/groups';

export function referenceStepsPerEpoch(plan: StepPlan): number {
  return Math.ceil(plan.datasetSize / plan.globalBatch);
}

export function referenceTotalSteps(plan: StepPlan): number {
  return referenceStepsPerEpoch(plan) * plan.epochs;
}

/** Where step `step` (1-based) reads: its epoch, first position and size. */
export function referenceStepPosition(step: number, plan: StepPlan): { epoch: number; cursor: number; count: number } {
  const perEpoch = referenceStepsPerEpoch(plan);
  const epoch = Math.floor((step - 1) / perEpoch);
  const cursor = ((step - 1) % perEpoch) * plan.globalBatch;
  return { epoch, cursor, count: Math.max(0, Math.min(plan.globalBatch, plan.datasetSize - cursor)) };
}

/** Record position after `step` steps were committed. */
export function referencePositionAfter(step: number, plan: StepPlan): { epoch: number; cursor: number } {
  if (step === 0) return { epoch: 0, cursor: 0 };
  const { epoch, cursor, count } = referenceStepPosition(step, plan);
  return cursor + count >= plan.datasetSize ? { epoch: epoch + 1, cursor: 0 } : { epoch, cursor: cursor + count };
}

/** Every commitEvery-th step of each epoch, each epoch's last step and the job's last step. */
export function referenceIsCommitPoint(step: number, plan: StepPlan): boolean {
  const perEpoch = referenceStepsPerEpoch(plan);
  const inEpoch = ((step - 1) % perEpoch) + 1;
  return inEpoch % plan.commitEvery === 0 || inEpoch === perEpoch || step === referenceTotalSteps(plan);
}

/** The positions [start, start+count) of `step` that `rank` computes under `shares`. */
export function referenceSlice(step: number, plan: StepPlan, shares: readonly number[], rank: number) {
  const { cursor, count } = referenceStepPosition(step, plan);
  return assignStep(cursor, count, shares)[rank];
}

/** The positions `rank` computes under `shares` in steps `first..last` of a run without holes, merged. */
export function referenceRankRanges(
  first: number,
  last: number,
  plan: StepPlan,
  shares: readonly number[],
  rank: number,
): PositionRange[] {
  const out: PositionRange[] = [];
  for (let step = first; step <= last; step++) {
    const s = referenceSlice(step, plan, shares, rank);
    if (s.count > 0) out.push([s.start, s.start + s.count]);
  }
  return mergeRanges(out);
}
